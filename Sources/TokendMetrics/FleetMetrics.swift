/// A fleet session's lease, shared record and store (sessions with `shared-store` only).
public final class FleetMetrics: Sendable {
    public let lockWait: Histogram
    public let lockLosses: Counter
    public let conflicts: Counter
    /// One statement to the store, from sending it to its answer.
    public let roundTrip: Histogram
    // Read from the store's status each time metrics are gathered (once a second).
    public let copyAge: Gauge
    public let leaseHeld: Gauge
    public let leaseRemaining: Gauge
    public let leaseEpoch: Gauge
    let following: [String: Gauge]
    public static let followingModes = ["polling", "listening", "notificationsLost"]

    public init(session: String, in metrics: Metrics = Metrics()) {
        let label = [("session", session)]
        lockWait = metrics.histogram(
            "tokend_fleet_lock_wait_seconds", help: "How long this host waited for the fleet lock.", labels: label)
        lockLosses = metrics.counter(
            "tokend_fleet_lock_losses",
            help: "Fleet locks not obtained in time, or lost with their connection while held.", labels: label)
        conflicts = metrics.counter(
            "tokend_fleet_write_conflicts",
            help: "Writes to the shared record refused because another host wrote a newer version (compare and swap).",
            labels: label)
        roundTrip = metrics.histogram(
            "tokend_fleet_store_round_trip_seconds",
            help: "One statement to the fleet's store, from sending it to its answer.", labels: label)
        copyAge = metrics.gauge(
            "tokend_fleet_copy_age_seconds",
            help: "Seconds since this host last read or wrote the fleet's copy; -1 before the first.", labels: label)
        leaseHeld = metrics.gauge(
            "tokend_fleet_lease_held", help: "1 while this host holds the session's refresh lease, else 0.", labels: label)
        leaseRemaining = metrics.gauge(
            "tokend_fleet_lease_remaining_seconds",
            help: "Seconds left on the refresh lease as this host last saw it, whoever holds it; 0 when free.",
            labels: label)
        leaseEpoch = metrics.gauge(
            "tokend_fleet_lease_epoch", help: "The epoch of the lease as this host last saw it held.", labels: label)
        var following: [String: Gauge] = [:]
        for mode in Self.followingModes {
            following[mode] = metrics.gauge(
                "tokend_fleet_following",
                help: "1 for how this host learns of other hosts' writes (polling, listening, notificationsLost), 0 for the others.",
                labels: label + [("mode", mode)])
        }
        self.following = following
    }

    /// What the store's status says, shown as it is.
    public func show(copyAge age: Double?, leaseHeld held: Bool, leaseRemaining remaining: Double, leaseEpoch epoch: Int?,
                     following mode: String) {
        copyAge.set(age ?? -1)
        leaseHeld.set(held ? 1 : 0)
        leaseRemaining.set(remaining)
        if let epoch { leaseEpoch.set(epoch) }
        for (name, gauge) in following { gauge.set(name == mode ? 1 : 0) }
    }
}
