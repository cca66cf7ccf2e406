import Synchronization

/// The one timeout race in tokend: `body`'s result if it finishes within
/// `limit`, nil if time runs out first. `body` need not honour cancellation:
/// when time is up it is cancelled and abandoned, not awaited, so a body
/// stuck in a call that ignores cancellation cannot hold up the caller.
public func within<T: Sendable>(
    _ limit: Duration, _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    let outcome = Mutex<CheckedContinuation<T?, Error>?>(nil)
    let finish: @Sendable (Result<T?, Error>) -> Bool = { result in
        guard let waiting = outcome.withLock({ $0.take() }) else { return false }
        waiting.resume(with: result)
        return true
    }
    return try await withCheckedThrowingContinuation { continuation in
        outcome.withLock { $0 = continuation }
        let work = Mutex<Task<Void, Never>?>(nil)
        // The timer exists before the work starts, so work that finishes at
        // once always finds it to cancel (no timer outlives its call).
        let timer = Task {
            try? await Task.sleep(for: limit)
            if finish(.success(nil)) { work.withLock { $0 }?.cancel() }
        }
        let started = Task {
            let result: Result<T?, Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            // Finished first: the timer stops sleeping rather than outlive the call.
            if finish(result) { timer.cancel() }
        }
        work.withLock { $0 = started }
        // Time ran out before the work was stored: it is cancelled here instead.
        if outcome.withLock({ $0 == nil }) { started.cancel() }
    }
}
