/// When a host reads the store and how long it waits for another's lease:
/// pure arithmetic, its randomness passed in (a thousand hosts must not read
/// or retry at the same instant).
enum FleetTiming {
    /// The poll interval, jittered by ±10 % (`jitter` in 0...1 places it) so
    /// that a fleet's reads spread out; sooner if the copy's token is due for
    /// refresh before then: at expiry − refresh-margin, plus `spread` (0...1 s).
    /// `expiresAt` and `now` are Unix seconds: the copy's expiry is the
    /// provider's, read against this host's clock, as its own refresh plan is.
    static func nextRead(
        expiresAt: Int?, now: Double, poll: Duration, refreshMargin: Duration, jitter: Double, spread: Double
    ) -> Duration {
        let polled = poll * (0.9 + 0.2 * jitter)
        guard let expiresAt else { return polled }
        let due = Double(expiresAt) - Double(refreshMargin.components.seconds) + spread - now
        return due > 0 && .seconds(due) < polled ? .seconds(due) : polled
    }

    /// How long a host waiting for another's lease sleeps before it looks
    /// again, and the pause after that: `pause` (from 50 ms, doubling to 1 s),
    /// never past the lease's expiry (`remaining` + 10 ms), jittered into its
    /// upper half by `jitter` (0...1).
    static func leaseWait(pause: Duration, remaining: Double, jitter: Double) -> (sleep: Duration, next: Duration) {
        let step = min(pause, .seconds(remaining) + .milliseconds(10))
        return (step / 2 + step / 2 * jitter, min(pause * 2, .seconds(1)))
    }

    static let firstLeaseWait = Duration.milliseconds(50)

    /// How often a held lease is renewed: three renewals fit in one lease, so
    /// one missed renewal (the store slow or briefly away) does not lose it.
    static func renewal(of leaseTime: Duration) -> Duration { leaseTime / 3 }
}

extension Following {
    /// What became of the probe notification: heard (true) within the wait, or
    /// not (false: the stream ended; nil: the wait ran out). Only a probe heard
    /// proves LISTEN works; otherwise a pooler most likely swallows them, and
    /// the host polls only.
    init(probeHeard: Bool?) {
        self = probeHeard == true ? .listening : .notificationsLost
    }
}
