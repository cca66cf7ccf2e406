import CookieJar
import OAuth
import StateStore

/// How a session's keyed tokens are refreshed.
enum RefreshStrategy: String, Sendable {
    /// Every refresh asks for all the session's resources and its whole
    /// scope: one token's audience covers them all, and the refresh token is
    /// never narrowed (django-oauth-toolkit narrows it to what a refresh asks for).
    case sharedAudience = "shared-audience"
    /// Each key asks for its own resource and scope: the provider issues one
    /// resource per token and keeps refresh tokens wide (Entra ID).
    case perResource = "per-resource"
    /// Every refresh names no resource and asks for the whole scope, which no
    /// provider narrows; no key has a token of its own. Learnt when all the
    /// grant's resources together were refused but nothing showed whether the
    /// grant covers them all (a handed-in refresh token): asking for one
    /// resource could narrow the refresh token for everyone.
    case sessionOnly = "session-only"
}

/// What one refresh sends, and whether its answer tells the strategy.
struct RefreshTargetChoice {
    var request: RefreshTarget
    /// The first refresh for a key while the strategy is unknown: it asks for
    /// every resource at once, which no provider narrows, and the answer says
    /// whether the provider issues such tokens.
    var probing: Bool
}

extension SessionActor {
    // MARK: Keys callers may ask for

    /// The key a caller's resource and scope name, checked before anything
    /// else: a resource the session does not serve or a scope beyond its own
    /// is refused without an upstream call. The session's whole scope without
    /// a resource is the session's own token.
    public func key(resource: String?, scope: String?) throws -> TokenKey {
        let key = TokenKey(resource: resource, scope: scope)
        guard !key.isSession else { return .session }
        if shared != nil {
            throw BrokerError.resourceNotAllowed(
                name, resource: resource ?? "", "a session shared by a fleet serves only its own token (no resource or scope)")
        }
        if let resource = key.resource, !keyPolicy.resources.contains(resource) {
            throw BrokerError.resourceNotAllowed(
                name, resource: resource,
                "\(resource) is not one of session \(name)'s resources: add it to resources in tokend.toml and log in again")
        }
        if record.phase == .active, let resource = key.resource, outsideGrant.contains(resource) {
            let reason = "the provider refused \(resource) (invalid_target): the handed-in grant does not cover it; "
                + "log in again to ask for it"
            forgetErrorsOfKeysNotHeld()
            keyErrors[key] = reason
            throw BrokerError.targetRefused(name, key: key, reason)
        }
        if record.phase == .active, let resource = key.resource, !record.grantResources.contains(resource) {
            throw BrokerError.resourceNotAllowed(
                name, resource: resource,
                "the session's login did not ask the provider for \(resource): log in again (\(Self.loginCommand(name))) so the grant covers it")
        }
        guard let scope = key.scope else { return key }
        let granted = TokenKey.tokens(keyPolicy.scope ?? record.scope)
        let asked = TokenKey.tokens(scope)
        if granted.isEmpty {
            throw BrokerError.scopeNotAllowed(
                name, scope: scope, "the session's scope is not known: set scope in tokend.toml to ask for narrower ones")
        }
        if !asked.isSubset(of: granted) {
            let beyond = asked.subtracting(granted).sorted().joined(separator: " ")
            throw BrokerError.scopeNotAllowed(
                name, scope: scope, "\"\(beyond)\" is beyond the session's scope \"\(granted.sorted().joined(separator: " "))\"")
        }
        return key.resource == nil && asked == granted ? .session : key
    }

    // MARK: Asking for a key's token

    /// GetToken for `key` (the session's own token when `key.isSession`).
    /// `person` (who asks; see KeyBudget) pays for a key the session does not hold yet.
    public func getToken(minValidSeconds: Int?, key: TokenKey, person: UInt32? = nil) async throws -> Token {
        guard !key.isSession else { return try await getToken(minValidSeconds: minValidSeconds) }
        if try await sharesSessionToken(key) {
            return try servedBySessionToken(try await getToken(minValidSeconds: minValidSeconds), key)
        }
        if let joined = try await joinInFlightOrCheck(key) { return joined }
        try admitNewKey(key, person: person)
        let now = clock.now()
        if let held = keyedToken(key),
            Double(held.expiresAt) - now
                >= Double(policy.requiredRemaining(
                    requested: minValidSeconds, issuedAt: held.lastRefreshAt, expiresAt: held.expiresAt))
        {
            return token(of: held)
        }
        return try await refreshKeyUnlessBackingOff(key, now: now)
    }

    /// Compare-and-refresh for `key`, with the session token's rules (see
    /// `refresh(staleGeneration:mayStart:)`); generations are the key's own.
    public func refresh(
        staleGeneration: Int?, key: TokenKey, person: UInt32? = nil, mayStart: @Sendable () -> Int? = { nil }
    ) async throws -> Token {
        guard !key.isSession else { return try await refresh(staleGeneration: staleGeneration, mayStart: mayStart) }
        if try await sharesSessionToken(key) {
            return try servedBySessionToken(try await refresh(staleGeneration: staleGeneration, mayStart: mayStart), key)
        }
        let refused = staleGeneration.map { min($0, keyedToken(key)?.generation ?? 0) }
        let token = try await refreshKeyOrCurrent(key, staleGeneration: staleGeneration, person: person, mayStart: mayStart)
        guard let refused, token.generation <= refused else { return token }
        throw noNewerToken()
    }

    func refreshKeyOrCurrent(
        _ key: TokenKey, staleGeneration: Int?, person: UInt32?, mayStart: @Sendable () -> Int?
    ) async throws -> Token {
        if let joined = try await joinInFlightOrCheck(key) { return joined }
        try admitNewKey(key, person: person)
        let now = clock.now()
        let valid = validKeyedToken(key, now: now)
        if let staleGeneration, let valid, staleGeneration < valid.generation {
            coalesced += 1
            return valid
        }
        if valid != nil, !backoff.isWaiting(now: now), let wait = mayStart() {
            throw RefreshLimited(session: name, retryAfter: wait)
        }
        return try await refreshKeyUnlessBackingOff(key, now: now)
    }

    /// The key's refresh in flight, joined (also while its events are being
    /// delivered: nobody sees the new token before subscribers); nil, once
    /// the session is active, the key not refused and its use noted.
    func joinInFlightOrCheck(_ key: TokenKey) async throws -> Token? {
        if let task = keyedInFlight[key] {
            coalesced += 1
            return try await task.value
        }
        try requireActive()
        try refusedStill(key)
        keyedSnapshots.touch(key, at: clock.now())
        return nil
    }

    func refreshKeyUnlessBackingOff(_ key: TokenKey, now: Double) async throws -> Token {
        if backoff.isWaiting(now: now), keyedInFlight[key] == nil {
            return try validTokenOrUnavailable(
                lastError ?? "token endpoint unavailable", retryAfter: backoff.retryAfter(now: now), now: now, key: key)
        }
        return try await joinOrStartKeyedRefresh(key, countAsCoalesced: true)
    }

    /// Joins the key's refresh in flight, or starts one; it waits its turn
    /// behind every other refresh of the session (see `refreshTurns`).
    func joinOrStartKeyedRefresh(_ key: TokenKey, countAsCoalesced: Bool) async throws -> Token {
        if let task = keyedInFlight[key] {
            if countAsCoalesced { coalesced += 1 }
            return try await task.value
        }
        if stopping {
            return try validTokenOrUnavailable("tokend is shutting down", retryAfter: 1, now: clock.now(), key: key)
        }
        let task = Task { try await self.refreshKeyCheckingGrant(key) }
        keyedInFlight[key] = task
        return try await task.value
    }

    /// Whether the session's own token serves `key` (shared-audience): it
    /// then has every resource of the grant in its audience and the whole
    /// scope. While that is not known, the session's next refresh asks for all
    /// the grant's resources at once and learns it; this waits for it.
    /// That refresh goes by the session's backoff like any other: while it
    /// waits, a keyed call is answered UpstreamUnavailable, not sent upstream.
    func sharesSessionToken(_ key: TokenKey) async throws -> Bool {
        if strategy == nil {
            try requireActive()
            let now = clock.now()
            if backoff.isWaiting(now: now), inFlight == nil {
                throw BrokerError.upstreamUnavailable(
                    name, lastError ?? "token endpoint unavailable", retryAfter: backoff.retryAfter(now: now))
            }
            _ = try await joinOrStartRefresh(countAsCoalesced: true)
            guard strategy != nil else {
                // The refresh that learns it did not get an answer: no key is served by a guess.
                let now = clock.now()
                throw BrokerError.upstreamUnavailable(
                    name, "which tokens the provider issues per resource is not known yet: "
                        + (lastError ?? "the token endpoint did not answer"), retryAfter: backoff.retryAfter(now: now) ?? 1)
            }
        }
        return strategy != .perResource
    }

    /// The key subscribers of `key` get events for: the session's own while its token serves the key.
    public func eventKey(for key: TokenKey) async throws -> TokenKey {
        guard !key.isSession else { return key }
        return try await sharesSessionToken(key) ? .session : key
    }

    /// The session's own token, named for the key it answers. Under
    /// session-only, a named resource the token is not confirmed to cover is
    /// refused: the token would not be for it.
    func servedBySessionToken(_ token: Token, _ key: TokenKey) throws -> Token {
        if strategy == .sessionOnly, let resource = key.resource, record.audience?.contains(resource) != true {
            let reason = "tokens for one resource are not served: " + (record.strategyReason ?? "the strategy is session-only")
            throw BrokerError.targetRefused(name, key: key, reason)
        }
        var token = token
        token.resource = key.resource
        return token
    }

    func keyedToken(_ key: TokenKey) -> KeyedToken? {
        record.keyedTokens.first { $0.resource == key.resource && $0.scope == key.scope }
    }

    func token(of held: KeyedToken) -> Token {
        Token(
            accessToken: held.accessToken, tokenType: held.tokenType, expiresAt: held.expiresAt,
            generation: held.generation, scope: held.grantedScope ?? held.scope ?? record.scope, resource: held.resource,
            audience: audience(confirmed: held.audience))
    }

    /// The key's token unless it has expired.
    func validKeyedToken(_ key: TokenKey, now: Double) -> Token? {
        guard record.phase == .active, !proofKeyGone, let held = keyedToken(key), Double(held.expiresAt) > now else { return nil }
        return token(of: held)
    }

    /// A key the provider refused a moment ago is refused again without asking.
    func refusedStill(_ key: TokenKey) throws {
        guard let until = keyRefusedUntil[key], clock.now() < until else { return }
        throw BrokerError.targetRefused(name, key: key, keyErrors[key] ?? "the provider refused this key")
    }

    // MARK: The strategy

    /// The strategy configuration or the provider's answers decided, if any.
    var strategy: RefreshStrategy? {
        switch keyPolicy.narrowing {
        case .narrows: .sharedAudience
        case .keepsWide: .perResource
        case .auto:
            record.strategy.flatMap(RefreshStrategy.init(rawValue:))
                ?? (record.grantResources.count < 2 ? .sharedAudience : nil)
        }
    }

    /// What status says: the strategy ("undetermined" until learnt) and why.
    var strategyInUse: (String, String) {
        let (strategy, reason) = strategyAndReason
        guard strategy != RefreshStrategy.perResource.rawValue, keyPolicy.restrictsResources else { return (strategy, reason) }
        return (
            strategy,
            reason + "; every token's audience covers all the grant's resources, so a user whom resource-access denies "
                + "one of them gets no token of this session at all")
    }

    var strategyAndReason: (String, String) {
        switch (keyPolicy.narrowing, strategy) {
        case (.narrows, _):
            return (RefreshStrategy.sharedAudience.rawValue, "narrowing = \"narrows\" in tokend.toml")
        case (.keepsWide, _):
            return (RefreshStrategy.perResource.rawValue, "narrowing = \"keeps-wide\" in tokend.toml")
        case (.auto, nil):
            return ("undetermined", "learnt at the next refresh, which asks for all the grant's resources at once")
        case (.auto, let learnt?) where record.strategy != nil:
            return (learnt.rawValue, record.strategyReason ?? "")
        case (.auto, let assumed?):
            return (
                assumed.rawValue,
                "the grant has fewer than two resources: nothing tells whether the provider narrows refresh tokens, so "
                    + "every refresh asks for the whole grant (set narrowing = \"keeps-wide\" for tokens of narrower scope)")
        }
    }

    /// What a refresh of `key` asks the provider for.
    /// The session's own refresh asks for every resource of the grant (which
    /// no provider narrows) unless the provider issues one resource per token;
    /// a key's own refresh happens only then (per-resource).
    func refreshTarget(for key: TokenKey) -> RefreshTargetChoice {
        let everything = RefreshTarget(resources: record.grantResources, scope: keyPolicy.scope)
        guard key.isSession else {
            return RefreshTargetChoice(
                request: RefreshTarget(resources: key.resource.map { [$0] } ?? [], scope: key.scope ?? keyPolicy.scope),
                probing: false)
        }
        switch strategy {
        case .sharedAudience: return RefreshTargetChoice(request: everything, probing: false)
        case .perResource, .sessionOnly:
            return RefreshTargetChoice(request: RefreshTarget(scope: keyPolicy.scope), probing: false)
        case nil: return RefreshTargetChoice(request: everything, probing: true)
        }
    }

    /// Keeps what the provider's answer showed; written with the next record.
    func learnStrategy(_ learnt: RefreshStrategy, because reason: String) {
        guard keyPolicy.narrowing == .auto, record.strategy == nil else { return }
        logger.notice("keyed token strategy learnt", metadata: ["strategy": "\(learnt.rawValue)", "reason": "\(reason)"])
        record.strategy = learnt.rawValue
        record.strategyReason = reason
    }

    var keyStatuses: [KeyedTokenStatus] {
        var keys = Set(record.keyedTokens.map { TokenKey(resource: $0.resource, scope: $0.scope) })
        keys.formUnion(keyErrors.keys)
        return keys.sorted { "\($0)" < "\($1)" }.map { key in
            let held = keyedToken(key)
            return KeyedTokenStatus(
                resource: key.resource, scope: key.scope, generation: held?.generation ?? 0, expiresAt: held?.expiresAt,
                lastError: keyErrors[key])
        }
    }

    // MARK: Answers

    /// A key's successful refresh: the rotated refresh token and the key's
    /// token on disk, then delivered to subscribers, then to callers.
    func adoptKeyed(
        _ response: TokenResponse, key: TokenKey, startedAt: Double, sentAt: ContinuousClock.Instant,
        cookieChanges: [CookieChange]
    ) async throws -> Token {
        let issuedAt = SessionRecord.clampedTime(Int(startedAt))
        let lifetime = lifetime(of: response, issuedAt: issuedAt)
        var next = record
        if let rotated = response.refreshToken { next.refreshToken = rotated }
        next.refreshStartedAt = nil
        let previous = keyedToken(key)
        let lastUsed = max(previous?.lastUsedAt ?? 0, Int(keyedSnapshots.lastUse(of: key) ?? clock.now()))
        var held = KeyedToken(
            resource: key.resource, scope: key.scope, accessToken: response.accessToken, tokenType: response.tokenType,
            grantedScope: response.scope, expiresAt: lifetime.expiresAt, generation: (previous?.generation ?? 0) + 1,
            lastRefreshAt: issuedAt, lastUsedAt: SessionRecord.clampedTime(lastUsed))
        await keepRotated(response)
        held.audience = await confirmedAudience(of: response.accessToken)
        makeRoom(for: key)
        next.keyedTokens = record.keyedTokens.filter { $0.resource != key.resource || $0.scope != key.scope }
        next.keyedTokens.append(held)
        if case .fenced = await persist(next, what: "refreshed state") {
            refreshFinished(.store, sentAt: sentAt)
            return try fleetWriteFailed(what: "the refreshed token")
        }
        refreshFinished(.success, sentAt: sentAt)
        announcing = true  // until subscribers have the events, callers do not see the new token
        record = next
        backoff.reset()
        keyErrors[key] = nil
        keyRefusedUntil[key] = nil
        keyDue[key] = policy.proactiveRefreshAt(issuedAt: issuedAt, expiresAt: held.expiresAt, jitter: random())
        if let note = lifetime.note { logger.warning("token lifetime not taken as given", metadata: ["note": "\(note)"]) }
        logger.info(
            "refreshed",
            metadata: [
                "key": "\(key)", "key_generation": "\(held.generation)", "expires_at": "\(held.expiresAt)",
                "rotated": "\(response.refreshToken != nil)",
            ])
        var events = cookieChanges.isEmpty ? [] : [event(.cookies, changes: cookieChanges)]
        var refreshed = event(.refreshed)
        refreshed.generation = held.generation
        refreshed.expiresAt = held.expiresAt
        refreshed.resource = key.resource
        refreshed.scope = key.scope
        events.append(refreshed)
        await publish(events, waitForDelivery: true)
        announcing = false
        updateSnapshot()
        return token(of: held)
    }

    /// The provider will not issue this key (invalid_target, invalid_scope):
    /// the key fails, for a minute without asking again; the session and its
    /// other keys go on.
    func refuseKey(_ key: TokenKey, _ error: TokenEndpointError) async throws -> Token {
        let reason = "the provider will not issue a token for \(key): \(error.reason)"
        forgetErrorsOfKeysNotHeld()
        keyErrors[key] = reason
        let now = clock.now()
        keyRefusedUntil[key] = now + Self.keyRefusalPause
        keyDue[key] = now + Self.keyRefusalPause
        logger.warning("key refused", metadata: ["key": "\(key)", "reason": "\(error.reason)"])
        if record.refreshStartedAt != nil {
            var cleared = record
            cleared.refreshStartedAt = nil
            await persist(cleared, what: "refresh marker")
            record.refreshStartedAt = nil
        }
        throw BrokerError.targetRefused(name, key: key, reason)
    }

    /// Seconds a refused key is answered from memory.
    static let keyRefusalPause = 60.0

    /// Refusals are remembered for at most `maximumKeys` keys the session does not hold: callers choose scopes.
    func forgetErrorsOfKeysNotHeld() {
        guard keyErrors.count >= keyPolicy.maximumKeys else { return }
        for key in keyErrors.keys where keyedToken(key) == nil {
            keyErrors[key] = nil
            keyRefusedUntil[key] = nil
            keyDue[key] = nil
        }
    }

    // MARK: Keeping keys

    /// A key the session does not hold yet, asked for by `person`: within the
    /// person's share of keys and budget of new ones, and with room made for
    /// it only from the person's own keys or keys nobody made in this process.
    /// Refused with TooManyKeys otherwise; no upstream call is made for it.
    func admitNewKey(_ key: TokenKey, person: UInt32?) throws {
        guard keyedToken(key) == nil, keyedInFlight[key] == nil else { return }
        let person = person ?? UInt32.max
        let made = record.keyedTokens.filter { keyMakers[TokenKey(resource: $0.resource, scope: $0.scope)] == person }
        if made.count >= keyPolicy.keysPerPerson {
            throw BrokerError.tooManyKeys(
                name, limit: keyPolicy.keysPerPerson, retryAfter: nil,
                "this user already holds \(made.count) keys (resource, scope) of session \(name), the most one person may; "
                    + "a key unused for \(keyPolicy.idleLifetime) s is forgotten, or ask for a key already held")
        }
        var budget = keyBudget ?? KeyBudget(capacity: keyPolicy.keysPerPerson, perMinute: keyPolicy.newKeysPerMinute)
        let wait = budget.take(for: person, now: clock.now())
        keyBudget = budget
        if let wait {
            throw BrokerError.tooManyKeys(
                name, limit: keyPolicy.keysPerPerson, retryAfter: wait,
                "this user made new keys of session \(name) faster than \(Int(keyPolicy.newKeysPerMinute)) a minute; "
                    + "try again in \(wait) s")
        }
        guard makeRoom(for: key, maker: person) else {
            throw BrokerError.tooManyKeys(
                name, limit: keyPolicy.maximumKeys, retryAfter: nil,
                "session \(name) holds its most keys (\(keyPolicy.maximumKeys)), all made by other users in use")
        }
        keyMakers[key] = person
    }

    /// Room for one more key: at `maximumKeys`, the least recently used key
    /// that `maker` made or nobody made here is forgotten; false when there is none.
    @discardableResult
    func makeRoom(for key: TokenKey, maker: UInt32? = nil) -> Bool {
        guard keyedToken(key) == nil, record.keyedTokens.count >= keyPolicy.maximumKeys else { return true }
        let idle = record.keyedTokens
            .map { (TokenKey(resource: $0.resource, scope: $0.scope), lastUse(of: $0)) }
            .filter { keyedInFlight[$0.0] == nil && [nil, maker ?? keyMakers[key]].contains(keyMakers[$0.0]) }
            .min { $0.1 < $1.1 }
        guard let (oldest, _) = idle else { return false }
        forget([oldest], why: "more than \(keyPolicy.maximumKeys) keys")
        return true
    }

    func lastUse(of held: KeyedToken) -> Double {
        max(Double(held.lastUsedAt), keyedSnapshots.lastUse(of: TokenKey(resource: held.resource, scope: held.scope)) ?? 0)
    }

    /// Keys nobody asked for in `idleLifetime` are forgotten (in memory now, on disk with the next write).
    func forgetIdleKeys() {
        let now = clock.now()
        let idle = record.keyedTokens
            .filter { now - lastUse(of: $0) > Double(keyPolicy.idleLifetime) }
            .map { TokenKey(resource: $0.resource, scope: $0.scope) }
            .filter { keyedInFlight[$0] == nil }
        guard !idle.isEmpty else { return }
        forget(idle, why: "unused for \(keyPolicy.idleLifetime) s")
    }

    func forget(_ keys: [TokenKey], why: String) {
        for key in keys {
            logger.info("key forgotten", metadata: ["key": "\(key)", "why": "\(why)"])
            record.keyedTokens.removeAll { $0.resource == key.resource && $0.scope == key.scope }
            keyDue[key] = nil
            keyErrors[key] = nil
            keyMakers[key] = nil
            keyedSnapshots.forget(key)
        }
    }
}
