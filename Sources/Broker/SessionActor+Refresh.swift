import CookieJar
import Logging
import OAuth
import Secrets
import StateStore

extension SessionActor {
    /// The body of a key's single in-flight refresh (the session's own token
    /// by default). Runs on the actor; clears the key's in-flight task before
    /// it returns or throws. Refreshes of all keys take turns (`refreshTurns`).
    func performRefresh(afterCrash: Bool, key: TokenKey = .session) async throws -> Token {
        defer {
            if key.isSession { inFlight = nil } else { keyedInFlight[key] = nil }
            reschedule()
        }
        await refreshTurns.take()
        defer { refreshTurns.pass() }
        guard record.phase == .active, let refreshToken = record.refreshToken else {
            throw BrokerError.loginRequired(name, record.reason ?? "not logged in")
        }
        let startedAt = clock.now()
        // Record durably that a refresh is about to be sent, so that a crash
        // between the server's answer and our write is recognised at start.
        var marked = record
        marked.refreshStartedAt = Int(startedAt)
        // A shared session sends nothing upstream unless the fleet's copy carries the marker.
        if await persist(marked, what: "refresh marker") != .saved {
            refreshFinished(.store, sentAt: nil)
            return try fleetWriteFailed(what: "the refresh marker")
        }
        record.refreshStartedAt = marked.refreshStartedAt
        checkpoint?("after-marker")

        var target = refreshTarget(for: key)
        // A handed-in grant's resources are the configuration's guess: when all of them together are
        // refused, all but one (never fewer than two: one alone could narrow the grant) may find the one
        // the grant lacks, which tells a provider that narrows from one that issues a resource per token.
        var omissions = target.probing && record.grantResourcesAssumed && record.grantResources.count >= 3
            ? record.grantResources : []
        var omitted: String?
        /// A refresh naming no resource, after a handed-in grant's resources were refused together.
        var resolvingGrant = false
        while true {
            refreshes += 1
            logger.debug("refreshing", metadata: ["generation": "\(record.generation)", "key": "\(key)"])
            let sentAt = ContinuousClock.now
            let answer = await endpoint.refresh(
                refreshToken: refreshToken, cookieHeader: cookieHeaderForEndpoint(), target: target.request)
            let answeredAt = ContinuousClock.now
            checkpoint?("after-response")
            let cookieChanges = receiveEndpointCookies(answer.setCookie)
            // Only invalid_target teaches: invalid_scope is about the scope, not about resources.
            if case .failure(let error) = answer.result, target.probing, error.code == "invalid_target" {
                await persistCookies(cookieChanges)
                if let next = omissions.popLast() {
                    omitted = next
                    target.request.resources = record.grantResources.filter { $0 != next }
                    continue
                }
                omitted = nil
                if record.grantResourcesAssumed {
                    // Nothing says the handed-in grant covers them all, so the refusal does not show that the
                    // provider issues one resource per token. A refresh naming none never narrows, and the
                    // audience of its token may say what the grant covers.
                    target = RefreshTargetChoice(request: RefreshTarget(scope: keyPolicy.scope), probing: false)
                    resolvingGrant = true
                    continue
                }
                learnStrategy(
                    .perResource,
                    because: "the provider refused one token for several resources (\(error.code ?? "refused")), "
                        + "so it issues one per resource, and each key asks for its own")
                omitted = nil
                target = refreshTarget(for: key)
                continue
            }
            if case .success = answer.result, let omitted {
                logger.warning("resource not in the grant", metadata: ["resource": "\(omitted)"])
                record.grantResources.removeAll { $0 == omitted }
                outsideGrant.insert(omitted)
            }
            let token = try await settleRefresh(
                answer, key: key, target: target, afterCrash: afterCrash, startedAt: startedAt, sentAt: sentAt,
                answeredAt: answeredAt, cookieChanges: cookieChanges)
            if resolvingGrant { await resolveHandedInGrant() }
            return token
        }
    }

    /// What one refresh's answer does to the session.
    func settleRefresh(
        _ answer: RefreshAnswer, key: TokenKey, target: RefreshTargetChoice, afterCrash: Bool, startedAt: Double,
        sentAt: ContinuousClock.Instant, answeredAt: ContinuousClock.Instant, cookieChanges: [CookieChange]
    ) async throws -> Token {
        // A bare refusal (see TokenEndpointError.Kind.refused) needs a login
        // only when the very next attempt is refused again.
        let confirming = refusedGeneration == record.generation
        refusedGeneration = nil
        switch answer.result {
        case .success(let response):
            if target.probing {
                learnStrategy(
                    .sharedAudience,
                    because: "the provider issued one token for all \(record.grantResources.count) resources of the grant, "
                        + "so the session's one token serves them all and every refresh asks for all of them, which "
                        + "never narrows the refresh token")
            }
            if key.isSession {
                return try await adopt(
                    response, startedAt: startedAt, sentAt: sentAt, answeredAt: answeredAt, cookieChanges: cookieChanges)
            }
            return try await adoptKeyed(
                response, key: key, startedAt: startedAt, sentAt: sentAt, cookieChanges: cookieChanges)
        case .failure(let error) where !key.isSession && error.kind == .rejected && !error.refusesClient && !error.refusesTarget:
            // Some providers refuse one resource with invalid_grant (consent or MFA required for that
            // API): the key fails, and the session's own refresh, next, tells whether the grant is gone.
            refreshFinished(.failed, sentAt: sentAt)
            await persistCookies(cookieChanges)
            do {
                return try await refuseKey(key, error)
            } catch let refusal as BrokerError {
                throw KeyRejected(refusal: refusal)
            }
        case .failure(let error)
        where (error.kind == .rejected && !error.refusesClient) || (error.kind == .refused && confirming):
            var reason = error.kind == .rejected
                ? error.reason : "the token endpoint refused the refresh token twice (\(error.reason)); log in again"
            if afterCrash {
                reason = "tokend stopped during a refresh and the server then refused the stored refresh token "
                    + "(\(error.code ?? "rejected")); the rotated token was lost. Log in again"
            }
            refreshFinished(.rejected, sentAt: sentAt)
            await requireLogin(reason: reason, earlierChanges: cookieChanges)
            throw BrokerError.loginRequired(name, reason)
        case .failure(let error) where !key.isSession && error.refusesTarget:
            refreshFinished(.failed, sentAt: sentAt)
            await persistCookies(cookieChanges)
            return try await refuseKey(key, error)
        case .failure(let error):
            refreshFinished(error.refusesClient ? .clientRefused : .failed, sentAt: sentAt)
            await persistCookies(cookieChanges)
            if error.refusesClient {
                // The grant is not in question: keep it, and ask again only after
                // long enough for someone to correct the configuration or the clock.
                return try await recordTransientFailure(
                    reason: "\(error.reason); the refresh token is kept: check client-secret-file (or client-key-file "
                        + "and client-key-id) and the host clock",
                    retryAfter: Self.clientRefusalDelay, key: key)
            }
            guard error.kind == .refused else {
                return try await recordTransientFailure(reason: error.reason, retryAfter: error.retryAfter, key: key)
            }
            // Asked once more at the next backoff step: the first one when nothing
            // failed before, a longer one when refusals alternate with other failures.
            refusedGeneration = record.generation
            return try await recordTransientFailure(
                reason: "\(error.reason); asking once more before requiring a login", retryAfter: error.retryAfter,
                key: key)
        }
    }

    /// Cookies the token endpoint set on an answer that brought no token: stored, then told.
    func persistCookies(_ changes: [CookieChange]) async {
        guard !changes.isEmpty else { return }
        await persist(what: "cookies")
        await publish([event(.cookies, changes: changes)], waitForDelivery: true)
    }

    /// Makes a successful response the session's state: on disk first, then in
    /// memory, then delivered to subscribers (its cookie changes, then
    /// `refreshed`), then returned to callers.
    func adopt(
        _ response: TokenResponse, startedAt: Double, sentAt: ContinuousClock.Instant, answeredAt: ContinuousClock.Instant,
        cookieChanges: [CookieChange]
    ) async throws -> Token {
        var next = applying(response, to: record, issuedAt: Int(startedAt))
        await keepRotated(response)
        next.audience = await confirmedAudience(of: response.accessToken)
        switch await persist(next, what: "refreshed state") {
        case .saved: break
        case .fenced:
            refreshFinished(.store, sentAt: sentAt)
            return try fleetWriteFailed(what: "the refreshed token")
        case .fleetUnreachable(let problem):
            // Kept here (and on disk): written to the fleet when the store answers again, unless
            // another host has taken over by then (with a grace period at the server, both tokens work).
            fleetBehind = true
            logger.error("refreshed token not yet in the shared store", metadata: ["problem": "\(problem)"])
            writeBehindPromptly()
        }
        // Without a server grace period, a crash loses the rotated token anywhere from the moment the
        // server may have processed the request (it was sent) until the answer is on disk: exposure.
        // durable: from the server's answer until it is on disk.
        refreshFinished(.success, sentAt: sentAt)
        let durableAt = ContinuousClock.now
        let durableAfter = durableAt - answeredAt
        let exposure = durableAt - sentAt
        checkpoint?("after-persist")
        announcing = true  // until subscribers have the events, callers do not see the new token
        record = next
        backoff.reset()
        lastError = unsavedRecord ? lastError : next.lifetimeNote
        if let note = next.lifetimeNote { logger.warning("token lifetime not taken as given", metadata: ["note": "\(note)"]) }
        logger.info(
            "refreshed",
            metadata: [
                "generation": "\(next.generation)", "expires_at": "\(next.expiresAt!)",
                "rotated": "\(response.refreshToken != nil)",
                "durable_us": "\(Self.microseconds(durableAfter))", "exposure_us": "\(Self.microseconds(exposure))",
            ])
        let token = currentToken!
        var events = cookieChanges.isEmpty ? [] : [event(.cookies, changes: cookieChanges)]
        events.append(event(.refreshed))
        await publish(events, waitForDelivery: true)
        announcing = false
        updateSnapshot()
        return token
    }

    /// Brings the token files in line with the session: the current access
    /// token while there is a valid one, no file otherwise; written only when
    /// that changes (the record changes far more often, refresh markers
    /// included). The writes go on the state file's queue, after the state
    /// they follow, never in the actor. Stopping keeps them: they stay valid
    /// across a restart. A failed write is logged; it never holds up callers.
    func syncTokenFiles() {
        guard !tokenFiles.isEmpty else { return }
        let token = tokenForFiles(now: clock.now())
        if case .some(let held) = tokenFilesHold, held == token { return }
        tokenFilesHold = .some(token)
        let (files, logger) = (tokenFiles, self.logger)
        file.afterSaves {
            var failed = false
            for file in files {
                guard let token else {
                    file.remove()
                    continue
                }
                do {
                    try file.write(token.reveal())
                } catch {
                    failed = true
                    logger.error("token file not written", metadata: ["path": "\(file.path)", "problem": "\(error)"])
                }
            }
            if failed { Task { await self.forgetTokenFiles() } }
        }
    }

    /// A token file write failed: what they hold is unknown again, and the next change retries.
    func forgetTokenFiles() {
        tokenFilesHold = nil
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000
    }

    /// `base` with a token response applied: the next generation, the new
    /// tokens (the old refresh token when not rotated), the expiry, no marker.
    func applying(_ response: TokenResponse, to base: SessionRecord, issuedAt: Int) -> SessionRecord {
        var next = base
        next.generation += 1
        next.accessToken = response.accessToken
        next.tokenType = response.tokenType
        if let rotated = response.refreshToken { next.refreshToken = rotated }
        if let scope = response.scope { next.scope = scope }
        let issuedAt = SessionRecord.clampedTime(issuedAt)
        let lifetime = lifetime(of: response, issuedAt: issuedAt)
        next.expiresAt = lifetime.expiresAt
        next.expirySource = lifetime.source
        next.lifetimeNote = lifetime.note
        next.lastRefreshAt = issuedAt
        next.refreshStartedAt = nil
        return next
    }

    /// When a token issued at `issuedAt` expires: the first source that gives
    /// a lifetime (expires_in, the JWT's exp, default-lifetime), each held to
    /// SessionRecord.maximumLifetime, and a note when one was not taken as given.
    func lifetime(of response: TokenResponse, issuedAt: Int) -> (expiresAt: Int, source: String, note: String?) {
        var notes: [String] = []
        var expiry: (at: Int, source: String)?
        if let expiresIn = response.expiresIn {
            let (at, note) = SessionRecord.expiry(issuedAt: issuedAt, lifetime: expiresIn, source: "expires_in")
            notes += note.map { [$0] } ?? []
            expiry = at.map { ($0, "expires_in") }
        }
        if expiry == nil, let exp = JWT.expiry(of: response.accessToken.reveal()) {
            let (at, note) = SessionRecord.expiry(issuedAt: issuedAt, lifetime: exp - issuedAt, source: "JWT exp")
            notes += note.map { [$0] } ?? []
            expiry = at.map { ($0, "jwt") }
        }
        let (fallback, _) = SessionRecord.expiry(issuedAt: issuedAt, lifetime: policy.defaultLifetime, source: "default")
        return (expiry?.at ?? fallback ?? issuedAt, expiry?.source ?? "default", notes.isEmpty ? nil : notes.joined(separator: "; "))
    }

    /// How long a refresh waits after the provider refused tokend's client (see `refusesClient`).
    static let clientRefusalDelay = 600

    func recordTransientFailure(reason: String, retryAfter: Int?, key: TokenKey = .session) async throws -> Token {
        let now = clock.now()
        failures += 1
        lastError = reason
        if !key.isSession {
            forgetErrorsOfKeysNotHeld()
            keyErrors[key] = reason
        }
        backoff.recordFailure(now: now, retryAfter: retryAfter, jitter: random())
        logger.warning(
            "refresh failed",
            metadata: [
                "reason": "\(reason)", "failures": "\(backoff.failures)",
                "retry_in": "\(backoff.retryAfter(now: now) ?? 0)",
            ])
        if record.refreshStartedAt != nil {
            var cleared = record
            cleared.refreshStartedAt = nil
            await persist(cleared, what: "refresh marker")
            record.refreshStartedAt = nil
        }
        return try validTokenOrUnavailable(reason, retryAfter: backoff.retryAfter(now: now), now: now, key: key)
    }

    /// The grant is gone: erase tokens and cookies from memory and disk and tell everyone.
    func requireLogin(reason: String, earlierChanges: [CookieChange] = []) async {
        let next = SessionRecord(phase: .loginRequired, reason: reason, generation: record.generation)
        record = next
        // The grant's keys went with it, and what was said about them.
        keyErrors = [:]
        keyRefusedUntil = [:]
        keyMakers = [:]
        backoff.reset()
        lastError = reason
        let removed = jar.removeAll()
        countCookieChanges(removed)
        let cookieChanges = earlierChanges + removed
        await persist(next, what: "login-required state")
        logger.error("login required", metadata: ["reason": "\(reason)"])
        await publish(endingEvents(.loginRequired, cookieChanges: cookieChanges), waitForDelivery: true)
    }

    /// Writes the record durably. A failed write is logged and kept in the
    /// status; the record stays in memory (the server may already have
    /// rotated the token, so dropping it would lose the session) and the write
    /// is retried with the next change.
    /// The jar is the actor's; its cookies and version go to disk with every record.
    ///
    /// Writes take turns, in the order they were asked for: the actor is free
    /// while a write is on its way to disk, and a second write queued behind
    /// it must not carry an older record (a refresh writes its rotated record
    /// before it becomes `record`). So a write of the current state passes no
    /// record (`next` nil) and reads `record` only when its turn comes.
    ///
    /// With a fleet lease held (and `toFleet`), the record also goes to the
    /// fleet's copy, fenced by the version this host last read.
    @discardableResult
    func persist(_ next: SessionRecord? = nil, what: String, toFleet: Bool = true) async -> PersistOutcome {
        await writes.take()
        defer { writes.pass() }
        var stored = next ?? record
        stored.cookies = jar.cookies
        stored.cookieVersion = jar.version
        stored.providerMetadata = providerMetadata
        do {
            try await file.save(stored)
            unsavedRecord = false
        } catch {
            unsavedRecord = true
            lastError = "could not save \(what): \(error)"
            logger.critical("state not saved", metadata: ["what": "\(what)", "problem": "\(error)"])
        }
        guard toFleet, let lease else { return .saved }
        do {
            guard let version = try await lease.write(stored, expected: sharedVersion) else { return .fenced }
            sharedVersion = version
            fleetBehind = false
            return .saved
        } catch {
            noteStoreProblem("\(error)")
            return .fleetUnreachable("\(error)")
        }
    }

    /// A rotated refresh token is on disk before anything else is awaited
    /// for its answer: confirming the new access token's audience may ask the
    /// provider (introspection, up to upstream-timeout), and a crash or a
    /// restart meanwhile would replay the spent token, which a provider with
    /// reuse detection answers by revoking the grant. What is written keeps
    /// the current access token and its audience; the full record follows.
    func keepRotated(_ response: TokenResponse) async {
        guard asksAudience, let rotated = response.refreshToken, rotated.reveal() != record.refreshToken?.reveal() else {
            return
        }
        var kept = record
        kept.refreshToken = rotated
        await persist(kept, what: "rotated refresh token", toFleet: false)
    }

    /// A fleet write failed during a refresh: this host's refresh stops here
    /// (the fleet's copy wins), and callers get the current token while it is
    /// valid, StoreUnavailable otherwise.
    func fleetWriteFailed(what: String) throws -> Token {
        let reason = "\(what) could not be written to the shared store: " + (storeProblem ?? "another host wrote first")
        logger.error("refresh stopped", metadata: ["reason": "\(reason)"])
        return try validToken(or: .storeUnavailable(name, reason), now: clock.now())
    }

    // MARK: Proactive refresh

    /// Plans the next refresh: at the backoff deadline after failures, before
    /// expiry otherwise, at once when there is no access token yet.
    func reschedule() {
        rescheduleKeys()
        scheduler?.cancel()
        scheduler = nil
        nextRefreshAt = nil
        guard record.phase == .active, record.refreshToken != nil, inFlight == nil, !stopping else { return }
        let at: Double
        if let retryAt = backoff.nextAttemptAt {
            at = retryAt
        } else if let expiresAt = record.expiresAt, record.accessToken != nil {
            at = policy.proactiveRefreshAt(issuedAt: record.lastRefreshAt, expiresAt: expiresAt, jitter: random())
        } else {
            at = clock.now()
        }
        nextRefreshAt = at
        scheduler = wake(at: at) { await $0.proactiveRefresh() }
    }

    /// A task that runs `action` on this session at `at`, unless cancelled before.
    func wake(at: Double, _ action: @escaping @Sendable (SessionActor) async -> Void) -> Task<Void, Never> {
        let clock = self.clock
        return Task {
            do {
                try await clock.sleep(until: at)
            } catch {
                return
            }
            await self.act(unlessCancelled: action)
        }
    }

    /// A woken task's action, on this session, unless it was cancelled meanwhile: a reschedule
    /// that ran between the end of the task's sleep and its turn here (a newer token adopted from
    /// the fleet's store, most often) cancels it, and the old plan must not refresh the new token.
    func act(unlessCancelled action: @Sendable (SessionActor) async -> Void) async {
        guard !Task.isCancelled else { return }
        await action(self)
    }

    func proactiveRefresh() async {
        // Run by a wake: cancelled by a reschedule after `act(unlessCancelled:)` looked, while its action hopped here.
        guard !Task.isCancelled else { return }
        scheduler = nil
        guard record.phase == .active, inFlight == nil else { return }
        _ = try? await joinOrStartRefresh(countAsCoalesced: false)
    }
}
