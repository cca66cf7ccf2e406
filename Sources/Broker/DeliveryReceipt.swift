import Deadline
import Synchronization

/// Lets the session wait until its subscribers' connections have taken an
/// event, so that web-side clients learn of cookie changes and a refresh
/// before any caller receives the new token. A subscriber that does not take
/// the event within the deadline (stuck, gone, or its buffer overflowed) stops
/// counting: one bad client cannot hold up the session.
public final class DeliveryReceipt: Sendable {
    private struct State {
        var remaining: Int
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state: Mutex<State>

    init(expected: Int) {
        state = Mutex(State(remaining: expected))
    }

    /// Called by each subscriber's consumer after writing the event.
    public func delivered() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.remaining -= 1
            guard state.remaining <= 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    private func expire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.remaining = 0
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns when every subscriber has taken the event, or after `deadline`.
    func wait(deadline: Duration) async {
        if (try? await within(deadline, { await self.allDelivered() })) == nil { expire() }
    }

    private func allDelivered() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.remaining <= 0 { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}
