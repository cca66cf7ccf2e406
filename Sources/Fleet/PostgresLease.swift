import Broker
import PostgresWire
import StateStore
import Synchronization

/// The session's lease, held from `lock()` to `release()`. Renewed every
/// third of its length while held (a slow token endpoint never loses it);
/// every write names its epoch and the row's version in the same statement,
/// so a host whose lease another host took writes nothing.
final class PostgresLease: SharedLease {
    let store: PostgresStore
    /// nil until this host writes, for a lease that `lock()` found free after
    /// the fleet's copy changed (see PostgresStore.takeLease).
    let epoch: Mutex<Int64?>
    /// The row as it was when the lease was taken (the same statement read it).
    let current: Result<SharedRecord?, any Error>
    let renewal = Mutex<Task<Void, Never>?>(nil)
    let released = Mutex(false)

    init(store: PostgresStore, epoch: Int64?, current: Result<SharedRecord?, any Error>) {
        self.store = store
        self.epoch = Mutex(epoch)
        self.current = current
        if let epoch { renewEvery(FleetTiming.renewal(of: store.leaseTime), epoch: epoch) }
    }

    func read() async throws -> SharedRecord? {
        do {
            return try current.get()
        } catch {
            throw SharedStoreError(store.explain(error))
        }
    }

    func write(_ record: SessionRecord, expected: Int64?) async throws -> Int64? {
        let store = self.store
        do {
            guard let epoch = try await held(expected: expected ?? 0) else {
                store.metrics?.conflicts.increment()
                return nil
            }
            // In the database's time; and the version the row will have, under the seal (see PostgresStore.open).
            var bound = PostgresStore.shifted(record, by: store.clockShift)
            bound.fleetVersion = (expected ?? 0) + 1
            let text = try store.codec.sealedText(bound)
            let generation = Int64(record.generation)
            let (session, host, seconds) = (store.session, store.hostID, store.leaseSeconds)
            let notify = store.address.listen
            let written = try await store.run("writing the shared record") { connection -> Int64? in
                let sent = PostgresStore.localNow()
                let rows = try await connection.query(
                    """
                    WITH w AS (
                        UPDATE tokend_shared SET version = version + 1, generation = \(generation), record = \(text),
                            written_by = \(host), written_at = now(), lease_expires = now() + \(seconds) * interval '1 second'
                        WHERE session = \(session) AND version = \(expected ?? 0)
                            AND lease_holder = \(host) AND lease_epoch = \(epoch)
                        RETURNING version)
                    SELECT version, CASE WHEN \(notify)
                        THEN pg_notify(\(PostgresStore.channel), version::text || ' ' || \(session))::text END,
                        extract(epoch FROM now())::float8
                    FROM w
                    """)
                for (version, _, databaseNow) in try rows.decode((Int64, String?, Double).self) {
                    store.sawDatabaseClock(databaseNow, sent: sent, received: PostgresStore.localNow())
                    return version
                }
                return nil
            }
            guard let written else {
                // Another host wrote a newer version, or took the lease: this host's copy loses.
                store.metrics?.conflicts.increment()
                return nil
            }
            store.knownVersion.max(written, ordering: .relaxed)
            // The write moved the lease's expiry too.
            store.sawOwnLease(epoch: epoch)
            store.sawCopy()
            return written
        } catch {
            // The store did not answer: no lease is lost by that (it lasts, and is taken back).
            throw SharedStoreError(store.explain(error))
        }
    }

    /// The lease's epoch, taken now if `lock()` deferred it; nil when another host has it or wrote since.
    func held(expected: Int64) async throws -> Int64? {
        if let epoch = epoch.withLock({ $0 }) { return epoch }
        guard let taken = try await store.takeForWrite(expected: expected) else { return nil }
        epoch.withLock { $0 = taken }
        renewEvery(FleetTiming.renewal(of: store.leaseTime), epoch: taken)
        return taken
    }

    func renewEvery(_ period: Duration, epoch: Int64) {
        let store = self.store
        let task = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: period)
                if Task.isCancelled { return }
                do {
                    if try await store.renew(epoch: epoch) { continue }
                    if Task.isCancelled { return }  // released meanwhile
                    store.metrics?.lockLosses.increment()
                    store.logger.warning("the fleet's lease was taken by another host while held; writes are fenced")
                    return
                } catch {
                    // Tried again next period; the lease lasts three.
                    store.logger.warning("fleet lease not renewed", metadata: ["problem": "\(store.explain(error))"])
                }
            }
        }
        renewal.withLock { $0 = task }
    }

    func release() async {
        guard released.withLock({ done in
            defer { done = true }
            return !done
        }) else { return }
        // A renewal in flight ends first: one that lands after the release would find the lease
        // free and report it taken by another host.
        if let renewing = renewal.withLock({ $0 }) {
            renewing.cancel()
            await renewing.value
        }
        if let epoch = epoch.withLock({ $0 }) {
            // Not released (the store unreachable): this host takes it back, or it expires.
            await store.giveUp(epoch: epoch)
        }
        store.turns.pass()
    }
}
