/// What making new keys (resource, scope) costs each person, so that one
/// reader cycling through keys can neither make the provider issue token
/// after token nor push everyone else's keys out. Separate from the forced
/// refresh limit: a tool that uses seven APIs makes seven keys at once.
///
/// Each person has a bucket of `capacity` new keys, refilled at `perMinute`;
/// a key held counts against its maker until it is forgotten.
struct KeyBudget {
    let capacity: Int
    let perMinute: Double
    private var buckets: [UInt32: (tokens: Double, at: Double)] = [:]

    init(capacity: Int, perMinute: Double) {
        self.capacity = max(1, capacity)
        self.perMinute = max(perMinute, 0.01)
    }

    /// nil when `person` may make a key now (and it is counted); else the seconds until it may.
    mutating func take(for person: UInt32, now: Double) -> Int? {
        let rate = perMinute / 60
        let full = Double(capacity)
        var bucket = buckets[person] ?? (full, now)
        bucket.tokens = min(full, bucket.tokens + max(0, now - bucket.at) * rate)
        bucket.at = now
        defer {
            buckets[person] = bucket
            if buckets.count > 4096 { buckets = buckets.filter { $0.value.tokens + (now - $0.value.at) * rate < full } }
        }
        guard bucket.tokens >= 1 else { return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up))) }
        bucket.tokens -= 1
        return nil
    }
}
