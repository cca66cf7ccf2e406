import Synchronization

/// The session's current token, readable without a hop onto the actor: the
/// fast path for cached GetToken. The actor writes it whenever its record
/// changes, except while a refresh's events are being delivered (callers
/// must not see a new token before subscribers have its events).
public final class TokenSnapshot: Sendable {
    struct State {
        var token: Token
        var issuedAt: Int?
    }
    private let state = Mutex<State?>(nil)
    /// Told whenever the token is set: answers made from it may no longer hold.
    private let changed: @Sendable () -> Void

    init(changed: @escaping @Sendable () -> Void) {
        self.changed = changed
    }

    func set(_ token: Token?, issuedAt: Int?) {
        state.withLock { $0 = token.map { State(token: $0, issuedAt: issuedAt) } }
        changed()
    }

    /// The audience of the session's current token, expired or not (nil: none is held):
    /// what the next one is likely to cover too, for refusing a call before any work.
    var audience: [String]? { state.withLock { $0?.token.audience } }

    /// The token if it has the remaining life GetToken requires, by the same
    /// rule the actor applies, and for how many more seconds it has it.
    func token(minValidSeconds: Int?, policy: RefreshPolicy, now: Double) -> (token: Token, goodFor: Double)? {
        guard let current = state.withLock({ $0 }) else { return nil }
        let required = policy.requiredRemaining(
            requested: minValidSeconds, issuedAt: current.issuedAt, expiresAt: current.token.expiresAt)
        let goodFor = Double(current.token.expiresAt) - now - Double(required)
        return goodFor >= 0 ? (current.token, goodFor) : nil
    }
}

extension SessionActor {
    /// A cached token good enough for GetToken(minValidSeconds), or nil when the
    /// actor has to decide (refresh needed, not active, shutting down).
    public nonisolated func cachedToken(minValidSeconds: Int?) -> Token? {
        snapshot.token(minValidSeconds: minValidSeconds, policy: policy, now: clock.now())?.token
    }

    /// The audience of the session's own current token, expired or not; nil when it holds none.
    public nonisolated var currentAudience: [String]? { snapshot.audience }

    /// As `cachedToken`, with the seconds it stays good enough (until the session's `tokenChanged` is called).
    public nonisolated func cachedTokenAndLife(minValidSeconds: Int?) -> (token: Token, goodFor: Double)? {
        snapshot.token(minValidSeconds: minValidSeconds, policy: policy, now: clock.now())
    }

    /// Called whenever the record changes (and after a refresh's events are
    /// delivered): the fast path and the token files follow the current token.
    func updateSnapshot() {
        // Keyed tokens first: setting the session's snapshot tells the server loop that answers changed.
        updateKeyedSnapshots()
        snapshot.set(stopping ? nil : currentToken, issuedAt: record.lastRefreshAt)
        syncTokenFiles()
    }
}

/// A session's keyed tokens for the lock-only fast path, and when each key
/// was last asked for there (keys nobody asks for are forgotten).
public final class KeyedSnapshots: Sendable {
    struct Held {
        var token: Token
        var issuedAt: Int?
    }
    private let state = Mutex<(held: [TokenKey: Held], used: [TokenKey: Double], sharing: Set<String>?)>(([:], [:], nil))

    init() {}

    /// `sharing`: the resources the session's own token serves (shared-audience), nil when it serves none.
    func set(_ tokens: [(TokenKey, Token, Int)], sharing: Set<String>?) {
        state.withLock { state in
            state.held = Dictionary(tokens.map { ($0.0, Held(token: $0.1, issuedAt: $0.2)) }, uniquingKeysWith: { a, _ in a })
            state.sharing = sharing
        }
    }

    /// The resources the session's own token serves, when it serves them all (shared-audience).
    public var sharedResources: Set<String>? { state.withLock { $0.sharing } }

    /// Keys asked for and never held (refused ones) are not kept past this many.
    static let maximumUses = 1024

    func touch(_ key: TokenKey, at now: Double) {
        state.withLock { state in
            if state.used.count >= Self.maximumUses, state.used[key] == nil {
                state.used = state.used.filter { state.held[$0.key] != nil }
            }
            state.used[key] = now
        }
    }

    func lastUse(of key: TokenKey) -> Double? {
        state.withLock { $0.used[key] }
    }

    func forget(_ key: TokenKey) {
        state.withLock { state in
            state.held[key] = nil
            state.used[key] = nil
        }
    }

    /// As TokenSnapshot.token, for `key`; a hit counts as a use.
    func token(_ key: TokenKey, minValidSeconds: Int?, policy: RefreshPolicy, now: Double) -> (token: Token, goodFor: Double)? {
        state.withLock { state in
            guard let held = state.held[key] else { return nil }
            let required = policy.requiredRemaining(
                requested: minValidSeconds, issuedAt: held.issuedAt, expiresAt: held.token.expiresAt)
            let goodFor = Double(held.token.expiresAt) - now - Double(required)
            guard goodFor >= 0 else { return nil }
            state.used[key] = now
            return (held.token, goodFor)
        }
    }
}

extension SessionActor {
    /// As `cachedTokenAndLife`, for another key of the session.
    public nonisolated func cachedTokenAndLife(minValidSeconds: Int?, key: TokenKey) -> (token: Token, goodFor: Double)? {
        guard !key.isSession else { return cachedTokenAndLife(minValidSeconds: minValidSeconds) }
        if let shared = keyedSnapshots.sharedResources {
            // The session's own token, when it serves this key (else the actor decides).
            guard key.resource.map(shared.contains) ?? true,
                key.scope.map({ TokenKey.tokens($0).isSubset(of: TokenKey.tokens(keyPolicy.scope)) && keyPolicy.scope != nil })
                    ?? true,
                var cached = cachedTokenAndLife(minValidSeconds: minValidSeconds)
            else { return nil }
            cached.token.resource = key.resource
            return cached
        }
        return keyedSnapshots.token(key, minValidSeconds: minValidSeconds, policy: policy, now: clock.now())
    }
}
