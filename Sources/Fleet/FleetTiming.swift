/// When a host reads the store and how long it waits for another's lease:
/// pure arithmetic, its randomness passed in (a thousand hosts must not read
/// or retry at the same instant).
enum FleetTiming {
    /// The extra read of a copy due for refresh, in Unix seconds (the copy's
    /// expiry is the provider's, read against this host's clock, as its own
    /// refresh plan is): at expiry − refresh-margin, when the fleet's first
    /// host refreshes, plus `spread` (0...1) of half the margin; nil when that
    /// time has passed.
    ///
    /// Half the margin, so that a fleet's reads of the new copy spread over
    /// it (10,000 hosts with the default 60 s margin: about 330 a second, not
    /// 10,000 in one second) while every host still reads with half its margin
    /// left, time enough to refresh by itself if the fleet did not.
    static func refreshRead(expiresAt: Int, now: Double, refreshMargin: Duration, spread: Double) -> Double? {
        let margin = refreshMargin.seconds
        let at = Double(expiresAt) - margin + margin / 2 * spread
        return at > now ? at : nil
    }

    /// How long a host waiting for another's lease sleeps before it looks
    /// again, and the pause after that: `pause` (from 50 ms, doubling to 1 s)
    /// but at least eight times the last look's round trip, never past the
    /// lease's expiry (`remaining` + 10 ms), jittered into its upper half by
    /// `jitter` (0...1).
    ///
    /// The round trip is the store's queue as this host meets it: at a fleet's
    /// expiry most of that queue is the waiters' own looks, and the holder's
    /// write waits behind them. Sleeping at least four round trips keeps each
    /// waiter in the queue a fifth of its time or less, however many hosts
    /// wait (a host does not know how many do), so the queue stays short
    /// enough for the write that ends the wait. On a quiet store the round
    /// trip is a few milliseconds and the pause is as it was.
    static func leaseWait(
        pause: Duration, roundTrip: Duration, remaining: Double, jitter: Double
    ) -> (sleep: Duration, next: Duration) {
        let step = min(max(pause, roundTrip * 8), .seconds(remaining) + .milliseconds(10))
        return (step / 2 + step / 2 * jitter, min(pause * 2, .seconds(1)))
    }

    static let firstLeaseWait = Duration.milliseconds(50)

    /// How often a held lease is renewed: three renewals fit in one lease, so
    /// one missed renewal (the store slow or briefly away) does not lose it.
    static func renewal(of leaseTime: Duration) -> Duration { leaseTime / 3 }
}

/// A host's reads of the fleet's copy after the one at start: its polls, each
/// one interval ± 10 % after the last, the first at a random point of the
/// first interval; and one extra read of each copy at its refresh (see
/// FleetTiming.refreshRead), which leaves the polls where they are. Were the
/// polls planned from that read, a fleet that all reads at a refresh would
/// poll in step ever after. Times are seconds since the host began polling,
/// on its monotonic clock.
struct ReadPlan {
    let poll: Duration
    let refreshMargin: Duration
    /// When the next poll is due.
    private(set) var pollAt: Double
    /// The expiry of the copy whose refresh read is planned or done.
    private(set) var refreshOf: Int?
    /// When that read is due; nil once done, or when it was past.
    private(set) var refreshAt: Double?

    /// `phase` (0...1) places the first poll in the first interval.
    init(poll: Duration, refreshMargin: Duration, phase: Double) {
        self.poll = poll
        self.refreshMargin = refreshMargin
        pollAt = (poll * phase).seconds
    }

    /// A read starts at `now`: it is the poll if the poll is due (the next
    /// then one interval ± 10 % later, `jitter` in 0...1 placing it), the
    /// refresh read if that is due, or both (within a millisecond: one read).
    mutating func reading(at now: Double, jitter: Double) {
        let due = now + 0.001
        if pollAt <= due { pollAt = now + (poll * (0.9 + 0.2 * jitter)).seconds }
        if let at = refreshAt, at <= due { refreshAt = nil }
    }

    /// The read at `now` failed: the next is a retry `after` then.
    mutating func failed(at now: Double, retry after: Duration) {
        pollAt = now + after.seconds
    }

    /// A read at `now` (`wallNow` on this host's clock) found a copy that
    /// expires at `expiresAt` (Unix seconds; nil: none): its refresh read is
    /// planned once, `spread` (0...1) placing it.
    mutating func saw(expiresAt: Int?, at now: Double, wallNow: Double, spread: Double) {
        guard expiresAt != refreshOf else { return }
        refreshOf = expiresAt
        refreshAt = expiresAt.flatMap {
            FleetTiming.refreshRead(expiresAt: $0, now: wallNow, refreshMargin: refreshMargin, spread: spread)
        }.map { now + ($0 - wallNow) }
    }

    /// How long after `now` the next read is due.
    func wait(at now: Double) -> Duration {
        .seconds(max(0, min(pollAt, refreshAt ?? pollAt) - now))
    }
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
