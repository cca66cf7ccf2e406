import Synchronization

/// A first-come first-served turn within this process: one fleet lease at a
/// time per session (PostgreSQL's advisory locks are re-entrant within one
/// connection, so the process must queue its own users).
final class TurnQueue: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    func take() async {
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

    func pass() {
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
