import Synchronization

/// First come, first served: one holder at a time, the turn handed straight
/// to the next waiter. The session actor's writes to disk and adoptions of
/// the fleet's copy take turns (each spans awaits), and so do a process's
/// fleet leases (PostgreSQL's advisory locks are re-entrant within one
/// connection, so the process must queue its own users).
public final class TurnQueue: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    public init() {}

    public func take() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.busy {
                    state.waiting.append(continuation)
                    return false
                }
                state.busy = true
                return true
            }
            if now { continuation.resume() }
        }
    }

    public func pass() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
