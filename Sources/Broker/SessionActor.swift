import CookieJar
import DPoP
import Logging
import OAuth
import Secrets
import StateStore

/// The one owner of a session's refresh token, access token and generation.
///
/// Every refresh goes through `joinOrStartRefresh`: the in-flight refresh is a
/// stored Task that every later caller awaits, so any number of concurrent
/// askers cause one upstream call. State is re-checked after every `await`.
public actor SessionActor {
    public nonisolated let name: String
    /// The web origins whose pages may ask for this session's tokens through
    /// the browser bridge, and whose hosts' cookies it mirrors.
    public nonisolated let webOrigins: [String]
    /// What the integrations need to find this session: git hosts and the git user name.
    public nonisolated let gitHosts: [String]
    public nonisolated let gitUsername: String?
    /// The exact loopback redirect URI browser logins use (redirect-uri), if any.
    public nonisolated let redirectURI: String?
    /// The resources and scopes the session serves tokens for besides its own.
    public nonisolated let keyPolicy: KeyPolicy
    /// Files rewritten with the access token after every refresh (see syncTokenFiles).
    let tokenFiles: [TokenFile]
    /// What the token files hold: .some(token), .some(nil) when removed, nil
    /// before the first sync (files from the last run may be there).
    var tokenFilesHold: Secret??
    let policy: RefreshPolicy
    let endpoint: any TokenEndpoint
    let file: SessionFile
    let clock: any BrokerClock
    let logger: Logger
    let random: @Sendable () -> Double

    var record: SessionRecord {
        didSet {
            if oldValue.phase != record.phase { phaseSince = clock.now() }
            if oldValue.dpopKey != record.dpopKey { followProofKey() }
            if !announcing { updateSnapshot() }
        }
    }
    /// When the record took its phase (in this process: a loaded phase counts from the start).
    var phaseSince: Double?
    /// The current token for the lock-only fast path (see TokenSnapshot);
    /// `tokenChanged` (an init parameter) is called whenever it is set.
    public nonisolated let snapshot: TokenSnapshot
    var inFlight: Task<Token, Error>?
    /// The generation the refresh in flight renews; nil when it only follows
    /// another host's refresh (see adoptShared), which may end on any generation.
    var inFlightRenews: Int?
    /// Callers awaiting a refresh someone else started (tests wait for them).
    var refreshWaiters = 0
    /// The refresh in flight for each other key (see SessionActor+Keys).
    var keyedInFlight: [TokenKey: Task<Token, Error>] = [:]
    /// Every upstream refresh, for any key, takes its turn: each uses the
    /// newest refresh token and is durable before the next is sent.
    let refreshTurns = TurnQueue()
    /// Why a key's last refresh failed, and until when a key the provider
    /// refused is answered TargetRefused without asking again.
    var keyErrors: [TokenKey: String] = [:]
    var keyRefusedUntil: [TokenKey: Double] = [:]
    /// When each keyed token is due for its proactive refresh (jittered once per token).
    var keyDue: [TokenKey: Double] = [:]
    var keyScheduler: Task<Void, Never>?
    /// Resources a handed-in grant turned out not to cover (see performRefresh's probe).
    var outsideGrant: Set<String> = []
    /// Who made each key held (a person: see KeyBudget); keys loaded from disk have none.
    var keyMakers: [TokenKey: UInt32] = [:]
    /// Made at the first new key (see admitNewKey).
    var keyBudget: KeyBudget?
    /// Keyed tokens for the lock-only fast path, as `snapshot` is for the session's.
    public nonisolated let keyedSnapshots = KeyedSnapshots()
    var backoff = Backoff()
    var scheduler: Task<Void, Never>?
    var nextRefreshAt: Double?
    // Counted here and in the session's metrics in the same step: a scrape and a status read agree.
    var refreshes = 0 { didSet { file.metrics.refreshes.increment(by: max(0, refreshes - oldValue)) } }
    var coalesced = 0 { didSet { file.metrics.coalesced.increment(by: max(0, coalesced - oldValue)) } }
    var failures = 0 { didSet { file.metrics.failures.increment(by: max(0, failures - oldValue)) } }
    var lastError: String?
    /// The generation whose refresh was refused without an OAuth error code:
    /// the next refresh of that same generation confirms it or not. A login
    /// or another host's refresh moves the record on, and the flag with it.
    var refusedGeneration: Int?
    /// The server's subscribers, all through one hand-off (set by the first `join`).
    var fanOut: EventFanOut?
    /// Set when the last successful refresh could not be written to disk.
    var unsavedRecord = false
    /// Writes to disk take turns (see persist).
    let writes = TurnQueue()
    /// Set by stop(): no new refresh may start while tokend shuts down.
    var stopping = false
    /// The session's cookies. Persisted with the record (see `persist`).
    var jar: CookieJar
    /// Where the token endpoint's cookies come from and go back to (nil
    /// while discovery has not found the token endpoint).
    var cookieOrigin: CookieRequest? { endpoint.tokenURL.flatMap { CookieRequest(url: $0) } }
    /// Logins begun with beginLogin and not finished, by id.
    var pendingLogins: [String: PendingLogin] = [:]
    /// The discovery document in use (JSON), written with the record.
    var providerMetadata: String?
    /// Why discovery failed, while no document is known.
    var discoveryProblem: String?
    var discovery: Task<Void, Never>?
    /// Wakes at the next cookie expiry to remove it and tell subscribers.
    var cookieTimer: Task<Void, Never>?
    /// Set while a refresh's events are being delivered: callers wait for the
    /// in-flight refresh instead of taking the new token early.
    var announcing = false
    /// How long a publish waits for subscribers' connections to take its events.
    let deliveryDeadline: Duration
    /// Test-only: called at named points of a refresh ("after-marker",
    /// "after-response", "after-persist") so a crash test can kill tokend there.
    let checkpoint: (@Sendable (String) -> Void)?

    // MARK: Fleet (see SessionActor+Fleet)
    /// The fleet's copy of this session, when it is shared by several hosts.
    let shared: (any SharedStore)?
    /// The version of the fleet's copy that `record` reflects.
    var sharedVersion: Int64?
    /// Held while this host writes the session for the fleet; `persist` writes through it.
    var lease: (any SharedLease)?
    /// Why the shared store cannot be reached (nil when it can).
    var storeProblem: String?
    /// A refreshed record is here and on disk but not yet in the shared store.
    var fleetBehind = false
    /// Adoptions of the fleet's copy take turns (see adoptShared).
    let adoptions = TurnQueue()
    var watcher: Task<Void, Never>?

    // MARK: DPoP (see SessionActor+DPoP)
    /// Where new DPoP keys are made and stored ones read; nil: the session does not use DPoP.
    let dpop: DPoPSettings?
    /// The key the endpoint signs this session's requests with (the record's).
    var proofKeyInUse: (any ProofKey)?
    /// Why the key cannot be used (not in this machine's TPM...), while that lasts.
    var dpopProblem: String?

    public init(
        name: String, policy: RefreshPolicy, endpoint: any TokenEndpoint, file: SessionFile,
        clock: any BrokerClock = SystemClock(), logger: Logger,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) },
        cookiePolicy: CookiePolicy = CookiePolicy(publicSuffixes: .implicitOnly),
        deliveryDeadline: Duration = .milliseconds(500),
        webOrigins: [String] = [],
        gitHosts: [String] = [],
        gitUsername: String? = nil,
        redirectURI: String? = nil,
        keys: KeyPolicy = KeyPolicy(),
        tokenFiles: [TokenFile] = [],
        checkpoint: (@Sendable (String) -> Void)? = nil,
        shared: (any SharedStore)? = nil,
        dpop: DPoPSettings? = nil,
        tokenChanged: @escaping @Sendable () -> Void = {}
    ) {
        self.dpop = dpop
        self.snapshot = TokenSnapshot(changed: tokenChanged)
        self.name = name
        self.webOrigins = webOrigins
        self.gitHosts = gitHosts
        self.gitUsername = gitUsername
        self.redirectURI = redirectURI
        self.keyPolicy = keys
        self.tokenFiles = tokenFiles
        self.policy = policy
        self.endpoint = endpoint
        self.file = file
        self.clock = clock
        var logger = logger
        logger[metadataKey: "session"] = "\(name)"
        self.logger = logger
        self.random = random
        self.jar = CookieJar(policy: cookiePolicy)
        self.deliveryDeadline = deliveryDeadline
        self.checkpoint = checkpoint
        self.shared = shared
        self.record = SessionRecord(phase: .loginRequired, reason: "not logged in yet: log in with `\(Self.loginCommand(name))`")
    }

    /// The command that logs this session in, for reasons tokend writes: the
    /// default session's is `tokenctl login`, any other names itself.
    public nonisolated static func loginCommand(_ session: String) -> String {
        session == "default" ? "tokenctl login" : "tokenctl login --session \(session)"
    }

    /// Loads the stored state and starts proactive refreshing. A corrupt file
    /// leaves the session needing a login, with the reason in its status.
    public func start() {
        do {
            if let stored = try file.load() {
                record = stored
                if let note = stored.lifetimeNote {
                    lastError = note
                    logger.warning("stored token lifetime clamped", metadata: ["note": "\(note)"])
                }
            }
        } catch {
            logger.error("state file unreadable", metadata: ["problem": "\(error)"])
            lastError = error.description
            record = SessionRecord(phase: .loginRequired, reason: "state file unreadable: \(error.description)")
        }
        jar = CookieJar(policy: jar.policy, cookies: record.cookies, version: record.cookieVersion)
        expireCookies()
        if shared != nil {
            // The fleet's copy decides; a marker in it is handled by the next lock holder.
            startFollowingFleet()
        } else if record.phase == .active, record.refreshStartedAt != nil {
            logger.warning("previous process stopped during a refresh; retrying once with the stored refresh token")
            inFlight = Task { try await self.performRefresh(afterCrash: true) }
            inFlightRenews = record.generation
        }
        if phaseSince == nil { phaseSince = clock.now() }
        dropKeysNoLongerAllowed()
        startDiscovery()
        reschedule()
        updateKeyedSnapshots()
    }

    /// Stops proactive refreshing and lets an in-flight refresh finish (and persist).
    public func stop() async {
        stopping = true
        updateSnapshot()
        scheduler?.cancel()
        scheduler = nil
        cookieTimer?.cancel()
        cookieTimer = nil
        discovery?.cancel()
        discovery = nil
        watcher?.cancel()
        watcher = nil
        keyScheduler?.cancel()
        keyScheduler = nil
        updateKeyedSnapshots()
        if let inFlight { _ = try? await inFlight.value }
        for task in keyedInFlight.values { _ = try? await task.value }
        await shared?.close()
        fanOut?.finish(session: name, generation: record.generation)
    }

    // MARK: Asking for tokens

    public func getToken(minValidSeconds: Int?) async throws -> Token {
        if announcing, let inFlight { return try await inFlight.value }
        try requireActive()
        let now = clock.now()
        if let token = currentToken,
            Double(token.expiresAt) - now
                >= Double(policy.requiredRemaining(
                    requested: minValidSeconds, issuedAt: record.lastRefreshAt, expiresAt: token.expiresAt))
        {
            return token
        }
        return try await refreshUnlessBackingOff(now: now)
    }

    /// Compare-and-refresh: a caller holding an older generation than the
    /// current one gets the current token; otherwise the token is refreshed
    /// (joining a refresh already in flight).
    ///
    /// A caller that names a generation said that token was refused, so it
    /// never gets that generation or an older one back: when no newer token
    /// comes of the refresh, it gets the reason (UpstreamUnavailable with a
    /// retry hint, StoreUnavailable, LoginRequired). A generation above the
    /// current one is no token this session handed out and counts as the current one.
    ///
    /// A refresh the caller forces (no `staleGeneration`, or one at or above
    /// the current generation: nothing newer to hand out) asks `mayStart`
    /// before it makes an upstream call; joining a refresh in flight never
    /// does. `mayStart` returns nil to allow it, or the seconds to wait.
    public func refresh(staleGeneration: Int?, mayStart: @Sendable () -> Int? = { nil }) async throws -> Token {
        let refused = staleGeneration.map { min($0, record.generation) }
        if let refused { await awaitRefreshesThatMayEnd(on: refused) }
        let token = try await refreshOrCurrent(staleGeneration: staleGeneration, mayStart: mayStart)
        guard let refused, token.generation <= refused else { return token }
        throw noNewerToken()
    }

    /// Waits out a refresh in flight that may end on the refused generation
    /// itself: one that renews an older generation (a fleet host that started
    /// it before the refused token arrived from another host), or one that only
    /// follows another host's refresh. Joining it would leave the caller with
    /// no newer token and no refresh of its own; once it ends, the caller's
    /// refresh starts as usual. A refresh of the refused generation is joined.
    func awaitRefreshesThatMayEnd(on refused: Int) async {
        while let task = inFlight, (inFlightRenews ?? Int.min) < refused {
            refreshWaiters += 1
            _ = try? await task.value
            refreshWaiters -= 1
            if inFlight == task { return }
        }
    }

    /// Why a refresh that was asked for brought no newer token.
    func noNewerToken() -> BrokerError {
        if let storeProblem { return .storeUnavailable(name, "the shared store cannot be reached: \(storeProblem)") }
        let now = clock.now()
        return .upstreamUnavailable(
            name, lastError ?? "the token endpoint gave no newer token", retryAfter: backoff.retryAfter(now: now) ?? 1)
    }

    func refreshOrCurrent(staleGeneration: Int?, mayStart: @Sendable () -> Int?) async throws -> Token {
        if announcing, let inFlight { return try await inFlight.value }
        try requireActive()
        let now = clock.now()
        let valid = currentToken.flatMap { Double($0.expiresAt) > now ? $0 : nil }
        if let staleGeneration, staleGeneration < record.generation, let valid {
            coalesced += 1
            return valid
        }
        if inFlight == nil, valid != nil, !backoff.isWaiting(now: now), let wait = mayStart() {
            throw RefreshLimited(session: name, retryAfter: wait)
        }
        return try await refreshUnlessBackingOff(now: now)
    }

    func refreshUnlessBackingOff(now: Double) async throws -> Token {
        if backoff.isWaiting(now: now), inFlight == nil {
            return try validTokenOrUnavailable(
                lastError ?? "token endpoint unavailable", retryAfter: backoff.retryAfter(now: now), now: now)
        }
        return try await joinOrStartRefresh(countAsCoalesced: true)
    }

    func joinOrStartRefresh(countAsCoalesced: Bool) async throws -> Token {
        if let inFlight {
            if countAsCoalesced { coalesced += 1 }
            refreshWaiters += 1
            defer { refreshWaiters -= 1 }
            return try await inFlight.value
        }
        if stopping {
            return try validTokenOrUnavailable("tokend is shutting down", retryAfter: 1, now: clock.now())
        }
        let generation = record.generation
        let task = Task {
            try await self.shared == nil
                ? self.performRefresh(afterCrash: false) : self.performFleetRefresh(from: generation, onlyIfMarked: false)
        }
        inFlight = task
        inFlightRenews = generation
        return try await task.value
    }

    /// When no upstream call may be made: the current token while it is
    /// still valid (even if short of min-valid), otherwise UpstreamUnavailable.
    func validTokenOrUnavailable(_ reason: String, retryAfter: Int?, now: Double, key: TokenKey = .session) throws -> Token {
        let unavailable = BrokerError.upstreamUnavailable(name, reason, retryAfter: retryAfter)
        guard !key.isSession else { return try validToken(or: unavailable, now: now) }
        guard let token = validKeyedToken(key, now: now) else { throw unavailable }
        return token
    }

    /// The current token while it is still valid, otherwise `error`.
    func validToken(or error: BrokerError, now: Double) throws -> Token {
        guard let token = validToken(now: now) else { throw error }
        return token
    }

    /// The current token unless it has expired (however little life it has left).
    func validToken(now: Double) -> Token? {
        currentToken.flatMap { Double($0.expiresAt) > now ? $0 : nil }
    }

    var currentToken: Token? {
        guard record.phase == .active, !proofKeyGone, let access = record.accessToken, let expiresAt = record.expiresAt
        else {
            return nil
        }
        return Token(
            accessToken: access, tokenType: record.tokenType ?? "Bearer", expiresAt: expiresAt,
            generation: record.generation, scope: record.scope, audience: audience(confirmed: record.audience))
    }

    func requireActive() throws {
        guard record.phase == .active else {
            throw BrokerError.loginRequired(name, record.reason ?? "not logged in")
        }
        try requireProofKey()
    }
}

/// A forced refresh refused by the caller's limit (see `refresh(staleGeneration:mayStart:)`).
public struct RefreshLimited: Error, Sendable {
    public let session: String
    public let retryAfter: Int
}
