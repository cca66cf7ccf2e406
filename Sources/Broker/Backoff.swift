/// Exponential backoff after transient refresh failures: 1 s doubling to
/// 5 min, each delay scaled by a random factor in [0.8, 1.2] (still capped),
/// never shorter than the server's Retry-After (itself capped at 1 hour).
public struct Backoff: Sendable, Equatable {
    public static let initialDelay = 1.0
    public static let maximumDelay = 300.0
    public static let maximumRetryAfter = 3600.0

    public private(set) var failures = 0
    public private(set) var nextAttemptAt: Double?
    /// When the first of the current run of failures happened.
    public private(set) var failingSince: Double?

    public init() {}

    /// `jitter` is a random number in [0, 1].
    public mutating func recordFailure(now: Double, retryAfter: Int?, jitter: Double) {
        failures += 1
        if failingSince == nil { failingSince = now }
        let exponent = Double(min(failures - 1, 30))
        let base = min(Self.maximumDelay, Self.initialDelay * pow2(exponent))
        var delay = min(Self.maximumDelay, base * (0.8 + 0.4 * jitter))
        if let retryAfter { delay = max(delay, min(Double(retryAfter), Self.maximumRetryAfter)) }
        nextAttemptAt = now + delay
    }

    public mutating func reset() {
        failures = 0
        nextAttemptAt = nil
        failingSince = nil
    }

    /// True while no upstream call may be made.
    public func isWaiting(now: Double) -> Bool {
        guard let nextAttemptAt else { return false }
        return now < nextAttemptAt
    }

    /// Whole seconds until the next attempt, at least 1.
    public func retryAfter(now: Double) -> Int? {
        nextAttemptAt.map { max(1, Int(($0 - now).rounded(.up))) }
    }
}

private func pow2(_ exponent: Double) -> Double {
    var result = 1.0
    for _ in 0..<Int(exponent) { result *= 2 }
    return result
}
