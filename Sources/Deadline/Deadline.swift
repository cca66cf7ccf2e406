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
        let timer = Mutex<Task<Void, Never>?>(nil)
        let work = Task {
            let result: Result<T?, Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            // Finished first: the timer stops sleeping rather than outlive the call.
            if finish(result) { timer.withLock { $0 }?.cancel() }
        }
        timer.withLock { timer in
            timer = Task {
                try? await Task.sleep(for: limit)
                if finish(.success(nil)) { work.cancel() }
            }
        }
    }
}
