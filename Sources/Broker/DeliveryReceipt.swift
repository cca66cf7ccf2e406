import Deadline
import Synchronization

/// Lets the session wait until its subscribers' connections have taken an
/// event, so that web-side clients learn of cookie changes and a refresh
/// before any caller receives the new token. The fan-out reports the event
/// taken once every subscriber has it (one that is gone counts as served);
/// past the deadline (a stuck or overflowing subscriber) the session goes on:
/// one bad client cannot hold it up.
final class DeliveryReceipt: Sendable {
    private struct State {
        var delivered = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    /// Called by the fan-out once the event has left for every subscriber.
    func delivered() {
        state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.delivered = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }

    /// Returns when the event was delivered, or after `deadline`.
    func wait(deadline: Duration) async {
        if (try? await within(deadline, { await self.taken() })) == nil { delivered() }
    }

    private func taken() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.delivered { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}
