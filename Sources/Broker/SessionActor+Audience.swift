import OAuth
import Secrets
import StateStore

/// Which of the session's resources a token covers. Access rules
/// (resource-access, web-resources) are checked against this, never against
/// the name a caller asked for: RFC 8707 lets a provider ignore `resource`,
/// and a token asked for without one carries whatever audience the provider
/// gives by default.
///
/// The rule: a token covers exactly the resources its audience names, when
/// the provider says what that is (the access token's JWT `aud`, or the
/// introspection endpoint's `aud`) and every value of it names one of the
/// session's resources (by its URI or a value listed in resource-audiences).
/// Otherwise it covers every resource of the grant and of the configuration:
/// an audience nobody confirmed, or one tokend cannot read, fails closed.
extension SessionActor {
    /// Every resource an unconfirmed token may cover, in configuration order.
    var wholeGrant: [String] {
        keyPolicy.resources + record.grantResources.filter { !keyPolicy.resources.contains($0) }
    }

    /// What a token with this stored confirmation covers (see the rule above). A session
    /// whose resources were all removed from tokend.toml still has a grant that carries them.
    func audience(confirmed: [String]?) -> [String] {
        guard !keyPolicy.resources.isEmpty || !record.grantResources.isEmpty else { return [] }
        return confirmed ?? wholeGrant
    }

    /// The resources the provider says `accessToken` covers; nil when it does
    /// not say, or says something tokend cannot map to the session's resources.
    /// Asked only of sessions with resources (an introspection costs a request).
    /// Whether a new access token's audience is confirmed (the session has resources).
    var asksAudience: Bool { !keyPolicy.resources.isEmpty || !record.grantResources.isEmpty }

    func confirmedAudience(of accessToken: Secret) async -> [String]? {
        guard asksAudience else { return nil }
        switch await endpoint.audience(of: accessToken) {
        case .unknown(let why):
            logger.info("token audience not confirmed: taken to cover every resource of the grant", metadata: ["why": "\(why)"])
            return nil
        case .stated(let values, let source):
            let covered = Self.resources(named: values, among: wholeGrant, audiences: keyPolicy.audiences)
            if covered == nil {
                logger.warning(
                    "token audience names no resource of the session: taken to cover every resource of the grant",
                    metadata: ["aud": "\(values.joined(separator: " "))", "source": "\(source)"])
            }
            return covered
        }
    }

    /// The resources `values` name, in `resources`' order; nil when a value names none of them,
    /// or there is no value at all (an empty audience restricts nothing).
    static func resources(named values: [String], among resources: [String], audiences: [String: [String]]) -> [String]? {
        guard !values.isEmpty else { return nil }
        var covered = Set<String>()
        for value in values {
            let named = resources.filter { $0 == value || (audiences[$0] ?? []).contains(value) }
            guard !named.isEmpty else { return nil }
            covered.formUnion(named)
        }
        return resources.filter(covered.contains)
    }
}

// MARK: What the provider's answers teach

extension SessionActor {
    /// A login's first token: one whose confirmed audience covers two or more
    /// resources shows that the provider issues one token for several, and
    /// which resources the grant has.
    func learnFromFirstToken(_ audience: [String]?, into next: inout SessionRecord) {
        guard keyPolicy.narrowing == .auto, let audience, audience.count >= 2 else { return }
        next.grantResources = audience
        next.strategy = RefreshStrategy.sharedAudience.rawValue
        next.strategyReason =
            "the provider's first token covers \(audience.count) resources (\(audience.joined(separator: ", "))), so it issues one "
            + "token for several and every refresh asks for all of the grant's, which never narrows the refresh token"
        logger.notice("keyed token strategy learnt", metadata: ["strategy": "shared-audience", "from": "the login's token"])
    }

    /// After a refresh naming no resource (the handed-in grant's resources
    /// were refused together), still holding the refresh turn. Its token's
    /// confirmed audience decides, and nothing asked can narrow the grant:
    /// - two or more resources: the provider issues one token for several,
    ///   and these are the grant (shared-audience);
    /// - one resource R: a provider that narrows would have shown its whole
    ///   list, so the grant is {R} there and asking for another resource S is
    ///   refused without narrowing anything; a provider that keeps refresh
    ///   tokens wide issues S's token (per-resource, kept as S's key);
    /// - not confirmed: nothing tells, and no refresh names a resource (session-only).
    func resolveHandedInGrant() async {
        guard keyPolicy.narrowing == .auto, record.strategy == nil else { return }
        guard let covered = record.audience, !covered.isEmpty else {
            return await settleStrategy(
                .sessionOnly,
                because: "the provider refused all the resources tokend.toml lists together, and nothing says whether the "
                    + "handed-in grant covers them all (its tokens' audience is not confirmed): asking for one resource could "
                    + "narrow the refresh token for everyone, so no refresh names one. Log in (\(Self.loginCommand(name))) so the grant "
                    + "asks for them, or set narrowing in tokend.toml")
        }
        if covered.count >= 2 {
            let outside = record.grantResources.filter { !covered.contains($0) }
            outsideGrant.formUnion(outside)
            record.grantResources = covered
            return await settleStrategy(
                .sharedAudience,
                because: "a refresh naming no resource got a token for \(covered.joined(separator: ", ")): the handed-in grant "
                    + "covers these, the provider issues one token for several, and every refresh asks for all of them")
        }
        guard let only = covered.first, let other = wholeGrant.first(where: { $0 != only }),
            let refreshToken = record.refreshToken
        else { return await settleStrategy(.sharedAudience, because: "the grant covers one resource") }
        var marked = record
        marked.refreshStartedAt = Int(clock.now())
        guard await persist(marked, what: "refresh marker") == .saved else { return }
        record.refreshStartedAt = marked.refreshStartedAt
        refreshes += 1
        let startedAt = clock.now()
        let sentAt = ContinuousClock.now
        let answer = await endpoint.refresh(
            refreshToken: refreshToken, cookieHeader: cookieHeaderForEndpoint(),
            target: RefreshTarget(resources: [other], scope: keyPolicy.scope))
        let cookieChanges = receiveEndpointCookies(answer.setCookie)
        switch answer.result {
        case .success(let response):
            learnStrategy(
                .perResource,
                because: "a refresh naming no resource got a token for \(only) alone, and one naming \(other) got a token too: "
                    + "the provider issues one resource per token and keeps refresh tokens wide")
            _ = try? await adoptKeyed(
                response, key: TokenKey(resource: other), startedAt: startedAt, sentAt: sentAt, cookieChanges: cookieChanges)
        case .failure(let error) where error.code == "invalid_target":
            refreshFinished(.failed, sentAt: sentAt)
            await persistCookies(cookieChanges)
            let outside = record.grantResources.filter { $0 != only }
            outsideGrant.formUnion(outside)
            record.grantResources = [only]
            record.refreshStartedAt = nil
            await settleStrategy(
                .sharedAudience,
                because: "the handed-in grant covers \(only) alone: a refresh naming none got a token for it, and one naming "
                    + "\(other) was refused (invalid_target); log in again for \(outside.joined(separator: ", "))")
        case .failure(let error):
            refreshFinished(.failed, sentAt: sentAt)
            await persistCookies(cookieChanges)
            record.refreshStartedAt = nil
            await settleStrategy(
                .sessionOnly,
                because: "the provider refused all the resources tokend.toml lists together, and asking for \(other) alone "
                    + "failed (\(error.reason)): no refresh names a resource. Log in again, or set narrowing in tokend.toml")
        }
    }

    /// Learns `strategy` and writes it down.
    func settleStrategy(_ strategy: RefreshStrategy, because reason: String) async {
        learnStrategy(strategy, because: reason)
        await persist(what: "strategy")
        updateSnapshot()
    }

    /// A key's refresh; when the provider refuses it invalid_grant, the
    /// session's own refresh, next, decides whether the grant is gone (then
    /// LoginRequired) or only that resource is refused (TargetRefused).
    func refreshKeyCheckingGrant(_ key: TokenKey) async throws -> Token {
        do {
            return try await performRefresh(afterCrash: false, key: key)
        } catch let rejected as KeyRejected {
            logger.notice("key refused invalid_grant: the session's own refresh decides", metadata: ["key": "\(key)"])
            do {
                _ = try await joinOrStartRefresh(countAsCoalesced: false)
            } catch let error as BrokerError where error.code == .loginRequired {
                throw error
            } catch {}
            throw rejected.refusal
        }
    }

    /// Forgets what was learnt of the provider (an admin's ResetStrategy):
    /// the strategy, the grant's resources as learnt, and the keyed tokens
    /// made under them. The next refresh learns again.
    public func resetStrategy() async throws -> SessionStatus {
        await settle()
        try await withRefreshTurn { try await fleetExclusive("strategy reset") {
            record.strategy = nil
            record.strategyReason = nil
            if !record.grantResources.isEmpty || record.phase == .active {
                record.grantResources = keyPolicy.resources
            }
            forget(record.keyedTokens.map { TokenKey(resource: $0.resource, scope: $0.scope) }, why: "strategy reset")
            outsideGrant = []
            keyErrors = [:]
            keyRefusedUntil = [:]
            await persist(what: "strategy reset")
        } }
        logger.notice("keyed token strategy reset")
        await publish([event(.strategyReset)], waitForDelivery: true)
        updateSnapshot()
        return status()
    }
}

// MARK: What status says pages may have

extension SessionActor {
    /// Whether pages (calls marked with a page origin) can get tokens at all, and why.
    var pageTokens: (String, String) {
        if webOrigins.isEmpty { return ("none", "the session has no web-origins: no page may use it") }
        if wholeGrant.isEmpty {
            return ("all", "the session has no resources: pages of its web-origins get its tokens as any reader does")
        }
        let web = keyPolicy.webResources
        if web.isEmpty {
            return ("none", "web-resources is empty, and every token of a session with resources covers one of them")
        }
        let outside = wholeGrant.filter { !web.contains($0) }
        if outside.isEmpty { return ("all", "every resource of the grant is in web-resources") }
        let listed = outside.joined(separator: ", ")
        if strategy == .sharedAudience, record.audience == nil || !(record.audience ?? []).allSatisfy(web.contains) {
            return (
                "none",
                "the provider issues one token for all the grant's resources (shared-audience), and \(listed) is not in "
                    + "web-resources: use a second session with only the resources pages may have")
        }
        return (
            "some",
            "pages get a token only when its audience, as the provider confirms it (JWT aud or introspection), is within "
                + "web-resources (\(web.joined(separator: ", "))); a token whose audience is not confirmed covers \(listed) too "
                + "and is refused")
    }
}

/// A key's refresh refused invalid_grant (see refreshKeyCheckingGrant).
struct KeyRejected: Error {
    let refusal: BrokerError
}
