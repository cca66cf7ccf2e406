#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
import Varlink

/// Limits forced refreshes per person and session: a token bucket of
/// `perMinute` tokens, refilled continuously. A refresh is forced when the
/// caller has nothing newer to receive — Refresh without staleGeneration, or
/// with one at or above the current generation — and no refresh is in flight
/// to join: only then can a caller make tokend call the provider again.
/// Refresh with an older staleGeneration (answered with the current token),
/// joining a refresh in flight and GetToken are never limited.
///
/// The key is the peer's person (the uid a subordinate uid belongs to, set by
/// the server at accept), not the caller's uid: one user entering a user
/// namespace has many uids and still one budget.
final class ForcedRefreshLimiter: Sendable {
    struct Key: Hashable {
        var person: UInt32
        var session: String
    }

    let perMinute: Int
    private let buckets = Mutex<[Key: (tokens: Double, at: Double)]>([:])
    private let now: @Sendable () -> Double

    init(perMinute: Int, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.perMinute = perMinute
        self.now = now
    }

    /// nil when allowed (and counted against the peer's person); otherwise the
    /// seconds until the next one is. A peer without credentials is one person.
    func take(for peer: PeerCredentials?, session: String) -> Int? {
        let person = peer?.person ?? UInt32.max
        let time = now()
        let capacity = Double(perMinute)
        let rate = capacity / 60
        return buckets.withLock { buckets in
            let key = Key(person: person, session: session)
            var bucket = buckets[key] ?? (capacity, time)
            bucket.tokens = min(capacity, bucket.tokens + (time - bucket.at) * rate)
            bucket.at = time
            defer {
                buckets[key] = bucket
                // Forget callers whose buckets are full again, so the table stays small.
                if buckets.count > 4096 { buckets = buckets.filter { $0.value.tokens + (time - $0.value.at) * rate < capacity } }
            }
            guard bucket.tokens >= 1 else { return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up))) }
            bucket.tokens -= 1
            return nil
        }
    }
}
