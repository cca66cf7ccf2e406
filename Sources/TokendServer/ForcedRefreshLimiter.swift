import Foundation
import Synchronization

/// Limits forced refreshes (Refresh without staleGeneration) per caller uid
/// and session: a token bucket of `perMinute` tokens, refilled continuously.
/// Compare-and-refresh (with staleGeneration) and GetToken are never
/// limited: they cannot make tokend call the provider more than once per
/// token, whatever the callers do.
final class ForcedRefreshLimiter: Sendable {
    struct Key: Hashable {
        var uid: UInt32
        var session: String
    }

    let perMinute: Int
    private let buckets = Mutex<[Key: (tokens: Double, at: Double)]>([:])
    private let now: @Sendable () -> Double

    init(perMinute: Int, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.perMinute = perMinute
        self.now = now
    }

    /// nil when allowed (and counted); otherwise the seconds until the next one is.
    func take(uid: UInt32, session: String) -> Int? {
        let time = now()
        let capacity = Double(perMinute)
        let rate = capacity / 60
        return buckets.withLock { buckets in
            let key = Key(uid: uid, session: session)
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
