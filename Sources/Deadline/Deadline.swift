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
        let work = Task {
            do {
                _ = finish(.success(try await body()))
            } catch {
                _ = finish(.failure(error))
            }
        }
        Task {
            try? await Task.sleep(for: limit)
            if finish(.success(nil)) { work.cancel() }
        }
    }
}
