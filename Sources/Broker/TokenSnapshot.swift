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

    func set(_ token: Token?, issuedAt: Int?) {
        state.withLock { $0 = token.map { State(token: $0, issuedAt: issuedAt) } }
    }

    /// The token if it has the remaining life GetToken requires, by the same rule the actor applies.
    func token(minValidSeconds: Int?, policy: RefreshPolicy, now: Double) -> Token? {
        guard let current = state.withLock({ $0 }) else { return nil }
        let required = policy.requiredRemaining(
            requested: minValidSeconds, issuedAt: current.issuedAt, expiresAt: current.token.expiresAt)
        return Double(current.token.expiresAt) - now >= Double(required) ? current.token : nil
    }
}

extension SessionActor {
    /// A cached token good enough for GetToken(minValidSeconds), or nil when the
    /// actor has to decide (refresh needed, not active, shutting down).
    public nonisolated func cachedToken(minValidSeconds: Int?) -> Token? {
        snapshot.token(minValidSeconds: minValidSeconds, policy: policy, now: clock.now())
    }

    /// Called whenever the record changes (and after a refresh's events are
    /// delivered): the fast path and the token files follow the current token.
    func updateSnapshot() {
        snapshot.set(stopping ? nil : currentToken, issuedAt: record.lastRefreshAt)
        syncTokenFiles()
    }
}
