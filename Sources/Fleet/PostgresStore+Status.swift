import Broker
import Synchronization

/// A lease as the database last described it: its holder, its epoch and the
/// time it had left by the database's clock, and when this host heard that
/// (by its own monotonic clock, which only measures the time since).
struct LeaseSighting: Sendable, Equatable {
    var holder: String
    var epoch: Int64
    var remaining: Duration
    var seen: ContinuousClock.Instant

    /// The time left at `now`: the database's figure less the time since, never below zero.
    func left(at now: ContinuousClock.Instant) -> Duration {
        let elapsed = now - seen
        return remaining > elapsed ? remaining - elapsed : .zero
    }
}

/// What this host has seen of the store, for status and metrics.
struct StoreSightings: Sendable {
    /// The lease as last seen; nil when it was free (released, or no row yet).
    var lease: LeaseSighting?
    /// When this host last read or wrote the fleet's copy.
    var copySeen: ContinuousClock.Instant?
    var lastRoundTrip: Duration?
    /// Seconds the database's clock is ahead of this host's (see PostgresStore.sawDatabaseClock).
    var clockOffset: Double?
    /// The journal has said the offset is large (said again once it was small meanwhile).
    var clockWarned = false
    /// What the store said about itself when last asked (see PostgresStore+Check), and whether it is being asked.
    var check: StoreFacts?
    var checking = false
    /// When the store is asked next (nil: once the schema is ready), and the wait after a failed ask.
    var nextCheck: ContinuousClock.Instant?
    var checkBackoff: Duration = .zero
    /// When a refused statement last brought the ask forward.
    var refusalCheck: ContinuousClock.Instant?

    /// The status these sightings make at `now`; a lease seen with no time left is not shown as held.
    func status(
        following: Following, pollInterval: Duration, statements: Int, connects: Int, hostID: String,
        now: ContinuousClock.Instant
    ) -> FleetStatus {
        let held = lease.flatMap { lease -> FleetLeaseStatus? in
            let left = lease.left(at: now)
            guard left > .zero else { return nil }
            return FleetLeaseStatus(
                holder: lease.holder, epoch: Int(lease.epoch), remaining: left.seconds, heldHere: lease.holder == hostID)
        }
        return FleetStatus(
            following: following.name, pollInterval: Int(pollInterval.components.seconds),
            copyAge: copySeen.map { (now - $0).seconds }, statements: statements, connects: connects,
            lastRoundTrip: lastRoundTrip?.seconds, lease: held, clockOffset: clockOffset,
            check: check.map {
                StoreCheckStatus(user: $0.user, missing: $0.missing, pooler: $0.pooler.rawValue, age: (now - $0.asked).seconds)
            })
    }
}

extension PostgresStore {
    /// Status and metrics see the same figures: metrics are gathered from
    /// every session's status once a second, so the copy's age grows there too.
    public func fleetStatus() -> FleetStatus? {
        checkIfDue()
        let status = sightings.withLock { $0 }.status(
            following: following.withLock { $0 }, pollInterval: address.pollInterval,
            statements: link.statements.load(ordering: .relaxed), connects: link.connects.load(ordering: .relaxed),
            hostID: hostID, now: .now)
        metrics?.show(
            copyAge: status.copyAge, leaseHeld: status.lease?.heldHere == true,
            leaseRemaining: status.lease?.remaining ?? 0, leaseEpoch: status.lease?.epoch, following: status.following)
        return status
    }

    /// The fleet's copy was read or written just now.
    func sawCopy() {
        sightings.withLock { $0.copySeen = .now }
    }

    /// The lease as a statement just returned it: `holder` nil or `remaining` 0 when free.
    func sawLease(holder: String?, epoch: Int64, remaining: Double) {
        let lease = holder.map { LeaseSighting(holder: $0, epoch: epoch, remaining: .seconds(remaining), seen: .now) }
        sightings.withLock { $0.lease = remaining > 0 ? lease : nil }
    }

    /// This host took or renewed its lease (for `leaseTime` from the statement's now()).
    func sawOwnLease(epoch: Int64) {
        sawLease(holder: hostID, epoch: epoch, remaining: leaseSeconds)
    }

    func sawRoundTrip(_ took: Duration) {
        sightings.withLock { $0.lastRoundTrip = took }
        metrics?.roundTrip.observe(took)
    }
}

extension Following {
    /// As status names it.
    var name: String {
        switch self {
        case .polling: "polling"
        case .listening: "listening"
        case .notificationsLost: "notificationsLost"
        }
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
