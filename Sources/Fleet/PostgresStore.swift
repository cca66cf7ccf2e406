import Broker
import Logging
import NIOSSL
import PostgresWire
import StateStore
import Synchronization
import TokendMetrics

/// One session's shared record in PostgreSQL (table `tokend_shared`), and
/// the session's refresh lease on the same row.
///
/// Nothing is session-scoped: the lease is taken in one `INSERT … ON
/// CONFLICT DO UPDATE … RETURNING` (free or expired, by the database's clock),
/// renewed while held, released in one `UPDATE`; every write names the
/// lease's epoch and the row's version in the same statement. A host learns
/// of other hosts' writes by polling (LISTEN only as an option), so it works
/// through PgBouncer in transaction mode and holds no connection while idle.
public final class PostgresStore: SharedStore {
    public let hostID: String
    let session: String
    let address: StoreAddress
    /// Seals and opens records (the state key every host of the fleet shares).
    let codec: SessionFile
    let logger: Logger
    /// How long a host waits for another to finish its refresh.
    let lockWait: Duration
    /// How long a lease lasts unless renewed: longer than upstream-timeout, so
    /// that a holder cut off from the database has given up its upstream call
    /// before another host may take over (see docs/fleet.md).
    let leaseTime: Duration
    /// The broker refreshes this long before expiry; the re-read is planned then.
    let refreshMargin: Duration
    let statementTimeout: Duration = .seconds(5)
    let link: StoreLink
    let turns = TurnQueue()
    let schemaReady = Mutex(false)
    /// The one schema check in progress: concurrent first calls wait for it rather than run their
    /// own (they would share the connection, and so one transaction, where the advisory lock is no bar).
    let schemaCheck = Mutex<Task<Void, any Error>?>(nil)
    /// Lock waits, lost leases and refused writes are counted here.
    let metrics: FleetMetrics?
    /// The newest version this process has read or written: a notification of
    /// it (this host's own write, most often) needs no read.
    let knownVersion = Atomic<Int64>(0)
    /// How this host learns of other hosts' writes (see PostgresStore+Watch).
    let following = Mutex(Following.polling)
    /// The epoch of this process's lease that it could not release.
    let unreleased = Mutex<Int64?>(nil)
    /// The lease, the copy's age and the last round trip, for status (see PostgresStore+Status).
    let sightings = Mutex(StoreSightings())
    static let channel = "tokend"

    public init(
        session: String, address: StoreAddress, password: String?, codec: SessionFile, hostID: String,
        lockWait: Duration, leaseTime: Duration, refreshMargin: Duration = .seconds(60), logger: Logger,
        metrics: FleetMetrics? = nil
    ) {
        self.metrics = metrics
        self.session = session
        self.address = address
        self.codec = codec
        self.hostID = hostID
        self.lockWait = lockWait
        self.leaseTime = leaseTime
        self.refreshMargin = refreshMargin
        var logger = logger
        logger[metadataKey: "session"] = "\(session)"
        self.logger = logger
        link = StoreLink(address: address, password: password, name: "tokend \(hostID)", logger: logger)
    }

    /// Runs `body` on the store's connection, the schema checked first (once per process).
    func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable (PostgresConnection) async throws -> T)
        async throws -> T
    {
        let logger = self.logger
        if !schemaReady.withLock({ $0 }) {
            let link = self.link
            let check = schemaCheck.withLock { running -> Task<Void, any Error> in
                if let running { return running }
                let started = Task {
                    try await link.run("checking the schema", limit: .seconds(150)) { connection in
                        var quiet = logger
                        quiet.logLevel = .warning
                        try await Schema.migrate(on: connection, logger: quiet)
                    }
                }
                running = started
                return started
            }
            do {
                try await check.value
            } catch {
                schemaCheck.withLock { if $0 == check { $0 = nil } }  // the next call checks again
                throw error
            }
            schemaReady.withLock { $0 = true }
            checkIfDue()
        }
        return try await link.run(what, limit: statementTimeout) { connection in
            let sent = ContinuousClock.now
            let result = try await body(connection)
            self.sawRoundTrip(.now - sent)
            return result
        }
    }

    /// A plain-language description of a failure, with PostgreSQL's own message when it sent one.
    func explain(_ error: any Error) -> String {
        if let error = error as? SharedStoreError { return error.description }
        if let error = error as? SharedStoreSetupError { return error.description }
        if let error = error as? StateLoadError { return error.description }
        if let error = error as? PostgresError {
            if let message = error.serverInfo?[.message] {
                let state = error.sqlState ?? "?"
                if state == "42501" {
                    checkAfterRefusal()  // status says which privileges, for doctor
                    return "\(address): \(message) (SQLSTATE \(state)): grant the store's user SELECT, INSERT and "
                        + "UPDATE on tokend_shared (and CREATE on the schema, for tokend to create its tables)"
                }
                return "\(address): \(message) (SQLSTATE \(state))"
            }
            // A refused certificate, a refused connection: what lies under the connection error says which.
            let cause = error.underlying.map { ": \(String(describing: $0))" } ?? ""
            if error.underlying is NIOSSLError {
                return "\(address): TLS handshake failed (is the server's certificate signed by sslrootcert?)\(cause)"
            }
            switch error.code {
            case .sslUnsupported:
                return "\(address): the server does not offer TLS (sslmode=\(address.sslMode))"
            case .connectionError, .connectionClosed:
                return "\(address): connection lost\(cause)"
            default: return "\(address): \(error)"
            }
        }
        return "\(address): \(error)"
    }

    public func close() async {
        await link.close()
    }

    // MARK: Reading

    /// The fleet's copy, nil when no host has written one yet; the lease as it is, for status.
    public func read() async throws -> SharedRecord? {
        let (session, seconds) = (session, leaseSeconds)
        let row = try await run("reading the shared record") { connection -> (Int64, String, String, String?, Int64, Double)? in
            let sent = Self.localNow()
            let rows = try await connection.query(
                """
                SELECT version, record, written_by, lease_holder, lease_epoch, extract(epoch FROM now())::float8,
                    CASE WHEN lease_holder IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM
                        greatest(lease_expires, pg_postmaster_start_time() + \(seconds) * interval '1 second') - now())::float8) END
                FROM tokend_shared WHERE session = \(session) AND version > 0
                """)
            for (version, text, writtenBy, holder, epoch, databaseNow, remaining)
                in try rows.decode((Int64, String, String, String?, Int64, Double, Double).self)
            {
                self.sawDatabaseClock(databaseNow, sent: sent, received: Self.localNow())
                return (version, text, writtenBy, holder, epoch, remaining)
            }
            return nil
        }
        if let row { sawLease(holder: row.3, epoch: row.4, remaining: row.5) }
        let record = try row.flatMap { try open(version: $0.0, text: $0.1, writtenBy: $0.2) }
        sawCopy()
        return record
    }

    /// Opens a sealed record read at `version`.
    func open(version: Int64, text: String, writtenBy: String) throws -> SharedRecord? {
        guard version > 0 else { return nil }  // the row holds a lease, no record yet
        knownVersion.max(version, ordering: .relaxed)
        var record: SessionRecord
        do {
            record = try codec.openSealed(text)
        } catch {
            throw SharedStoreError(
                "the shared record (written by \(writtenBy)) cannot be opened: \(error.problem). "
                    + "Every host of the fleet needs the same state key")
        }
        // A record sealed for another version was moved there by someone
        // with write access to the database, not written by a host.
        if let sealedFor = record.fleetVersion, sealedFor != version {
            throw SharedStoreError(
                "the shared record at version \(version) was sealed for version \(sealedFor): replayed or altered "
                    + "in the database; not adopted")
        }
        record = Self.shifted(record, by: -clockShift)  // to this host's clock
        return SharedRecord(version: version, record: record, writtenBy: writtenBy)
    }
}
