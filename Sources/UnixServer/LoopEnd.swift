import Synchronization

/// The moment a server loop has ended (its sockets closed), awaited whether or
/// not the waiting task is cancelled: `VarlinkServer.run` is cancelled to stop
/// the loop, and must return only once the loop has stopped, not when the
/// cancellation comes (a cancelled stream's iteration ends at once).
final class LoopEnd: Sendable {
    private let state = Mutex<(ended: Result<Void, Error>?, waiter: CheckedContinuation<Void, Error>?)>((nil, nil))

    /// The loop ended, with `failure` or stopped.
    func finish(_ failure: Error?) {
        let result: Result<Void, Error> = failure.map { .failure($0) } ?? .success(())
        let waiter = state.withLock { state -> CheckedContinuation<Void, Error>? in
            guard state.ended == nil else { return nil }
            state.ended = result
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: result)
    }

    /// Returns once `finish` has been called (at once if it has), throwing its failure. One waiter.
    func wait() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let ended = state.withLock { state -> Result<Void, Error>? in
                if state.ended == nil { state.waiter = continuation }
                return state.ended
            }
            if let ended { continuation.resume(with: ended) }
        }
    }
}
