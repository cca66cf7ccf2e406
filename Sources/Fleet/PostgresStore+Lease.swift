import Broker
import PostgresWire

/// The refresh lease: a row's holder, epoch and expiry, taken and renewed by
/// the database's clock (`now()`), never compared with a host's.
///
/// A held lease lasts until `greatest(lease_expires, pg_postmaster_start_time()
/// + lease)`: a holder that could not renew only because the database was down
/// gets a full lease after its restart to write the answer it may hold (the
/// provider has spent the stored refresh token then; a takeover would replay it).
/// A dead holder's lease is taken over one lease after the restart instead.
extension PostgresStore {
    /// Takes the session's lease, waiting while another host holds it.
    public func lock() async throws -> any SharedLease {
        try await lease(deferrable: false)
    }

    /// As `lock()`, but a host that waited while the copy moved on may get a lease taken only if it writes.
    public func lockForRefresh() async throws -> any SharedLease {
        try await lease(deferrable: true)
    }

    func lease(deferrable: Bool) async throws -> any SharedLease {
        await turns.take()
        let waited = ContinuousClock.now
        do {
            let lease = try await takeLease(deferrable: deferrable)
            metrics?.lockWait.observe(ContinuousClock.now - waited)
            return lease
        } catch {
            metrics?.lockLosses.increment()
            turns.pass()
            throw SharedStoreError(explain(error))
        }
    }

    /// One statement when the lease is free. While another host holds it, a
    /// jittered look at the row (50 ms doubling to 1 s, at least four round
    /// trips apart, never past the lease's expiry; see FleetTiming.leaseWait).
    /// A host that has seen the lease held, in a look or in the read just
    /// before, looks before it tries to take it: when the fleet's copy changed
    /// meanwhile and no refresh is marked under way, it gets a lease taken only
    /// if it writes. The change is most often the refresh it wanted, and a
    /// fleet at expiry then takes the lease once, not once per host that
    /// waited. It tries to take the lease only when the copy did not change
    /// (its holder gave up, or stopped) or a refresh is marked (its holder
    /// stopped mid-refresh). Only a refresh is `deferrable`: a login, logout or
    /// cookie change holds the lease from its read to its write, or another
    /// host's write between them would fence its own off unseen.
    func takeLease(deferrable: Bool) async throws -> PostgresLease {
        let deadline = ContinuousClock.now + lockWait
        var seen: Int64?
        var pause = FleetTiming.firstLeaseWait
        // The read just before (a compare-and-refresh's, most often) may have seen another host's lease:
        // then this host waits before it looks, as after a look.
        if let held = leaseSeenHeld() {
            seen = held.version
            let wait = FleetTiming.leaseWait(
                pause: pause, roundTrip: held.roundTrip, remaining: held.left.seconds, jitter: .random(in: 0...1))
            try await Task.sleep(for: wait.sleep)
            pause = wait.next
        }
        while true {
            if seen == nil, let (epoch, row) = try await tryTake() {
                return PostgresLease(store: self, epoch: epoch, current: Result { try open(row) })
            }
            let asked = ContinuousClock.now
            guard let state = try await leaseState() else {  // deleted meanwhile: take it anew
                seen = nil
                continue
            }
            let roundTrip = ContinuousClock.now - asked
            if state.remaining == 0 {
                let current = Result { try open(state.row) }
                if deferrable, let seen, state.row.version > seen,
                    (try? current.get())??.record.refreshStartedAt == nil
                {
                    return PostgresLease(store: self, epoch: nil, current: current)
                }
                if let (epoch, row) = try await tryTake() {
                    return PostgresLease(store: self, epoch: epoch, current: Result { try open(row) })
                }
                continue  // another host took it first
            }
            seen = seen ?? state.row.version
            guard ContinuousClock.now < deadline else {
                throw SharedStoreError(
                    "another host (\(state.holder)) held the fleet's lease for more than \(lockWait.components.seconds) s")
            }
            let wait = FleetTiming.leaseWait(
                pause: pause, roundTrip: roundTrip, remaining: state.remaining, jitter: .random(in: 0...1))
            try await Task.sleep(for: min(wait.sleep, deadline - .now))
            pause = wait.next
        }
    }

    /// When this host's last read found another host's lease with time left:
    /// the version it read, the time the lease has left now, and the round trip.
    func leaseSeenHeld() -> (version: Int64, left: Duration, roundTrip: Duration)? {
        let (lease, roundTrip) = sightings.withLock { ($0.lease, $0.lastRoundTrip) }
        guard let lease, lease.holder != hostID else { return nil }
        let left = lease.left(at: .now)
        guard left > .zero else { return nil }
        return (knownVersion.load(ordering: .relaxed), left, roundTrip ?? .zero)
    }

    typealias Row = (version: Int64, text: String, writtenBy: String)

    func open(_ row: Row) throws -> SharedRecord? {
        try open(version: row.version, text: row.text, writtenBy: row.writtenBy)
    }

    /// The lease if it is free or expired (the row made if there is none), with the row as it is then;
    /// or this process's own lease that it could not release (the database was gone), which it takes back
    /// at once: a refresh whose result is not yet in the store is written by the host that has it.
    func tryTake() async throws -> (Int64, Row)? {
        let (session, host, seconds) = (session, hostID, leaseSeconds)
        let own = unreleased.withLock { $0 } ?? -1
        let taken = try await run("taking the fleet's lease") { connection -> (Int64, Row)? in
            let sent = Self.localNow()
            let rows = try await connection.query(
                """
                INSERT INTO tokend_shared AS s
                    (session, version, generation, record, written_by, lease_holder, lease_epoch, lease_expires)
                VALUES (\(session), 0, 0, '', \(host), \(host), 1, now() + \(seconds) * interval '1 second')
                ON CONFLICT (session) DO UPDATE SET lease_holder = excluded.lease_holder,
                    lease_epoch = s.lease_epoch + 1, lease_expires = excluded.lease_expires
                WHERE s.lease_holder IS NULL
                    OR greatest(s.lease_expires, pg_postmaster_start_time() + \(seconds) * interval '1 second') <= now()
                    OR (s.lease_holder = excluded.lease_holder AND s.lease_epoch = \(own))
                RETURNING s.lease_epoch, s.version, s.record, s.written_by, extract(epoch FROM now())::float8
                """)
            for (epoch, version, text, writtenBy, databaseNow)
                in try rows.decode((Int64, Int64, String, String, Double).self)
            {
                self.sawDatabaseClock(databaseNow, sent: sent, received: Self.localNow())
                return (epoch, (version, text, writtenBy))
            }
            return nil
        }
        if let (epoch, _) = taken {
            sawOwnLease(epoch: epoch)
            sawCopy()
        }
        return taken
    }

    /// The row and who holds its lease for how many more seconds (0: free or expired).
    func leaseState() async throws -> (row: Row, holder: String, remaining: Double)? {
        let (session, seconds) = (session, leaseSeconds)
        let state = try await run("reading the fleet's lease") { connection -> (row: Row, holder: String, epoch: Int64, remaining: Double)? in
            let rows = try await connection.query(
                """
                SELECT version, record, written_by, coalesce(lease_holder, ''), lease_epoch,
                    CASE WHEN lease_holder IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM
                        greatest(lease_expires, pg_postmaster_start_time() + \(seconds) * interval '1 second') - now())::float8) END
                FROM tokend_shared WHERE session = \(session)
                """)
            for (version, text, writtenBy, holder, epoch, remaining)
                in try rows.decode((Int64, String, String, String, Int64, Double).self)
            {
                return ((version, text, writtenBy), holder, epoch, remaining)
            }
            return nil
        }
        guard let state else { return nil }
        sawLease(holder: state.holder, epoch: state.epoch, remaining: state.remaining)
        return (state.row, state.holder, state.remaining)
    }

    /// Takes a free lease for a write at `expected`: nil when another host holds it or wrote since.
    func takeForWrite(expected: Int64) async throws -> Int64? {
        let (session, host, seconds) = (session, hostID, leaseSeconds)
        let taken = try await run("taking the fleet's lease") { connection -> Int64? in
            let rows = try await connection.query(
                """
                UPDATE tokend_shared SET lease_holder = \(host), lease_epoch = lease_epoch + 1,
                    lease_expires = now() + \(seconds) * interval '1 second'
                WHERE session = \(session) AND version = \(expected)
                    AND (lease_holder IS NULL
                        OR greatest(lease_expires, pg_postmaster_start_time() + \(seconds) * interval '1 second') <= now())
                RETURNING lease_epoch
                """)
            for epoch in try rows.decode(Int64.self) { return epoch }
            return nil
        }
        if let taken { sawOwnLease(epoch: taken) }
        return taken
    }

    /// Moves the lease's expiry to `leaseTime` from now; false when this host no longer holds it.
    func renew(epoch: Int64) async throws -> Bool {
        let (session, host, seconds) = (session, hostID, leaseSeconds)
        let renewed = try await run("renewing the fleet's lease") { connection in
            let rows = try await connection.query(
                """
                UPDATE tokend_shared SET lease_expires = now() + \(seconds) * interval '1 second'
                WHERE session = \(session) AND lease_holder = \(host) AND lease_epoch = \(epoch) RETURNING 1
                """)
            for _ in try rows.decode(Int.self) { return true }
            return false
        }
        if renewed { sawOwnLease(epoch: epoch) }
        return renewed
    }

    /// Releases the lease; one this host could not release is remembered, to be taken back (`tryTake`).
    func giveUp(epoch: Int64) async {
        let (session, host) = (session, hostID)
        do {
            try await run("releasing the fleet's lease") { connection in
                _ = try await connection.query(
                    """
                    UPDATE tokend_shared SET lease_holder = NULL, lease_expires = now()
                    WHERE session = \(session) AND lease_holder = \(host) AND lease_epoch = \(epoch)
                    """)
            }
            unreleased.withLock { if $0 == epoch { $0 = nil } }
            sightings.withLock { if $0.lease?.epoch == epoch { $0.lease = nil } }
        } catch {
            unreleased.withLock { $0 = epoch }
        }
    }

    var leaseSeconds: Double { Double(leaseTime.components.seconds) }
}
