import Broker
import Deadline
import Logging
import NIOSSL
import PostgresNIO
import StateStore
import TokendMetrics
import Synchronization

/// One session's shared record in PostgreSQL (table `tokend_sessions`).
///
/// The fleet lock is a session-level advisory lock, held on a connection of
/// its own from `lock()` to `release()`: it spans the whole upstream exchange
/// (the marker must be committed before the request leaves, so a row lock in
/// a transaction would not do), and PostgreSQL releases it when that
/// connection ends: a killed host at once, a host cut off once TCP keepalive
/// gives up (about 11 s with the settings sent at connect). Every write is
/// fenced by the row's version. A second connection LISTENs for other hosts'
/// writes and re-reads the row every `rereadInterval` as a safety net.
public final class PostgresStore: SharedStore {
    public let hostID: String
    let session: String
    let address: StoreAddress
    let password: String?
    /// Seals and opens records (the state key every host of the fleet shares).
    let codec: SessionFile
    let logger: Logger
    /// How long a host waits for another to finish its refresh.
    let lockWait: Duration
    let statementTimeout: Duration = .seconds(5)
    let rereadInterval: Duration
    let turns = TurnQueue()
    let lockConnection = Mutex<PostgresConnection?>(nil)
    /// Why the watching connection failed last (nil once it reads again): the
    /// lock connection is then likely dead too, and is opened anew.
    let watchProblem = Mutex<String?>(nil)
    let schemaReady = Mutex(false)
    let connectionIDs = Atomic<Int>(0)
    /// Lock waits, lost locks and refused writes are counted here.
    let metrics: FleetMetrics?
    /// The newest version this process has read or written: a notification of
    /// it (this host's own write, most often) needs no read.
    let knownVersion = Atomic<Int64>(0)
    static let channel = "tokend"

    public init(
        session: String, address: StoreAddress, password: String?, codec: SessionFile, hostID: String,
        lockWait: Duration, rereadInterval: Duration = .seconds(10), logger: Logger, metrics: FleetMetrics? = nil
    ) {
        self.metrics = metrics
        self.session = session
        self.address = address
        self.password = password
        self.codec = codec
        self.hostID = hostID
        self.lockWait = lockWait
        self.rereadInterval = rereadInterval
        var logger = logger
        logger[metadataKey: "session"] = "\(session)"
        self.logger = logger
    }

    // MARK: Connections

    func connect(_ purpose: String) async throws -> PostgresConnection {
        var configuration = PostgresConnection.Configuration(
            host: address.host, port: address.port, username: address.user, password: password,
            database: address.database, tls: try address.tls())
        configuration.options.connectTimeout = .seconds(3)
        let lockTimeout = lockWait.components.seconds * 1000
        configuration.options.additionalStartupParameters = [
            ("application_name", "tokend \(hostID) \(purpose)"),
            // A host that vanishes without closing its connection lets go of the lock in about 11 s.
            ("tcp_keepalives_idle", "5"), ("tcp_keepalives_interval", "2"), ("tcp_keepalives_count", "3"),
            ("tcp_user_timeout", "10000"),
            ("lock_timeout", "\(lockTimeout)"),
        ]
        var quiet = logger
        quiet.logLevel = .warning
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: connectionIDs.wrappingAdd(1, ordering: .relaxed).newValue, logger: quiet)
        if !schemaReady.withLock({ $0 }) {
            do {
                try await Schema.migrate(on: connection, logger: quiet)
            } catch {
                try? await connection.close()
                throw error
            }
            schemaReady.withLock { $0 = true }
        }
        return connection
    }

    /// Runs `body`; past `limit`, closes `connection` (failing what waits on it) and throws.
    /// Does not wait for `body` to end: a query written to a connection that has
    /// just closed may never be answered.
    func within<T: Sendable>(
        _ limit: Duration, on connection: PostgresConnection, _ what: String,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        guard !connection.isClosed else { throw SharedStoreError("\(address): connection lost") }
        // A statement written to a connection that just closed may never be
        // answered: the deadline does not wait for it.
        guard let result = try await Deadline.within(limit, body) else {
            try? await connection.close()
            throw SharedStoreError("\(what) took more than \(limit.components.seconds) s (database unreachable?)")
        }
        return result
    }

    /// A plain-language description of a failure, with PostgreSQL's own message when it sent one.
    func explain(_ error: any Error) -> String {
        if let error = error as? SharedStoreError { return error.description }
        if let error = error as? SharedStoreSetupError { return error.description }
        if let error = error as? StateLoadError { return error.description }
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                let state = error.serverInfo?[.sqlState] ?? "?"
                if state == "55P03" {
                    return "another host held the fleet lock for more than \(lockWait.components.seconds) s"
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
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
                return "\(address): connection lost\(cause)"
            default: return "\(address): \(error.code)\(cause)"
            }
        }
        return "\(address): \(error)"
    }

    // MARK: SharedStore

    public func lock() async throws -> any SharedLease {
        await turns.take()
        do {
            let connection: PostgresConnection
            let suspect = watchProblem.withLock { $0 } != nil
            if let open = lockConnection.withLock({ $0 }), !open.isClosed, !suspect {
                connection = open
            } else {
                if let stale = lockConnection.withLock({ $0 }) { try? await stale.close() }
                connection = try await connect("lock")
                lockConnection.withLock { $0 = connection }
            }
            let session = self.session
            let logger = self.logger
            let waited = ContinuousClock.now
            try await within(lockWait + .seconds(5), on: connection, "waiting for the fleet lock") {
                _ = try await connection.query(
                    "SELECT pg_advisory_lock(\(FleetLock.classID), hashtext(\(session)))", logger: logger)
            }
            metrics?.lockWait.observe(ContinuousClock.now - waited)
            return PostgresLease(store: self, connection: connection)
        } catch {
            metrics?.lockLosses.increment()
            turns.pass()
            throw SharedStoreError(explain(error))
        }
    }

    public func close() async {
        let open = lockConnection.withLock { connection in
            defer { connection = nil }
            return connection
        }
        guard let open else { return }
        // A stop is bounded: a close the network does not confirm is abandoned.
        _ = try? await Deadline.within(statementTimeout) { try await open.close() }
    }

    public func watch(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async {
        var delay = Duration.seconds(1)
        while !Task.isCancelled {
            var opened: PostgresConnection?
            do {
                let connection = try await connect("watch")
                opened = connection
                delay = .seconds(1)
                try await follow(connection, handle)
            } catch is CancellationError {
            } catch where !Task.isCancelled {
                let problem = explain(error)
                watchProblem.withLock { $0 = problem }
                await handle(.unavailable(problem))
            } catch {
                // Stopping: the cancelled LISTEN ends with the connection's error, not CancellationError.
            }
            // Every path closes the connection: one dropped open leaks its socket
            // (and a debug build's PostgresNIO traps on it, stalling shutdown).
            try? await opened?.close()
            if Task.isCancelled { break }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(10))
        }
    }

    /// Reads the row now, after every notification for this session, and every `rereadInterval`.
    func follow(_ connection: PostgresConnection, _ handle: @escaping @Sendable (SharedStoreEvent) async -> Void)
        async throws
    {
        let session = self.session
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await connection.listen(on: Self.channel) { notifications in
                    await handle(.current(try await self.read(on: connection)))
                    for try await note in notifications {
                        // "VERSION SESSION", as the write's pg_notify sends it.
                        let parts = note.payload.split(separator: " ", maxSplits: 1)
                        guard parts.count == 2, parts[1] == session else { continue }
                        if let version = Int64(parts[0]), version <= self.knownVersion.load(ordering: .relaxed) { continue }
                        await handle(.current(try await self.read(on: connection)))
                    }
                }
                throw SharedStoreError("\(self.address): notifications ended")
            }
            group.addTask {
                while true {
                    try await Task.sleep(for: self.rereadInterval)
                    await handle(.current(try await self.read(on: connection)))
                }
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    func read(on connection: PostgresConnection) async throws -> SharedRecord? {
        let session = self.session
        let logger = self.logger
        let row = try await within(statementTimeout, on: connection, "reading the shared record") {
            () -> (Int64, String, String)? in
            let rows = try await connection.query(
                "SELECT version, record, written_by FROM tokend_sessions WHERE session = \(session)", logger: logger)
            for try await row in rows.decode((Int64, String, String).self) { return row }
            return nil
        }
        watchProblem.withLock { $0 = nil }
        guard let (version, text, writtenBy) = row else { return nil }
        knownVersion.max(version, ordering: .relaxed)
        let record: SessionRecord
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
        return SharedRecord(version: version, record: record, writtenBy: writtenBy)
    }
}

/// The fleet lock, held on the store's lock connection.
final class PostgresLease: SharedLease {
    let store: PostgresStore
    let connection: PostgresConnection
    let released = Mutex(false)

    init(store: PostgresStore, connection: PostgresConnection) {
        self.store = store
        self.connection = connection
    }

    func read() async throws -> SharedRecord? {
        do {
            return try await store.read(on: connection)
        } catch {
            throw SharedStoreError(store.explain(error))
        }
    }

    func write(_ record: SessionRecord, expected: Int64?) async throws -> Int64? {
        let store = self.store
        let connection = self.connection
        do {
            // The version the row will have, under the seal (see PostgresStore.read).
            var bound = record
            bound.fleetVersion = (expected ?? 0) + 1
            let text = try store.codec.sealedText(bound)
            let generation = Int64(record.generation)
            return try await store.within(store.statementTimeout, on: connection, "writing the shared record") {
                let rows: PostgresRowSequence
                if let expected {
                    rows = try await connection.query(
                        """
                        WITH w AS (
                            UPDATE tokend_sessions SET version = version + 1, generation = \(generation),
                                record = \(text), written_by = \(store.hostID), written_at = now()
                            WHERE session = \(store.session) AND version = \(expected)
                            RETURNING version)
                        SELECT version, pg_notify(\(PostgresStore.channel), version::text || ' ' || \(store.session))::text
                        FROM w
                        """, logger: store.logger)
                } else {
                    rows = try await connection.query(
                        """
                        WITH w AS (
                            INSERT INTO tokend_sessions (session, version, generation, record, written_by)
                            VALUES (\(store.session), 1, \(generation), \(text), \(store.hostID))
                            ON CONFLICT (session) DO NOTHING
                            RETURNING version)
                        SELECT version, pg_notify(\(PostgresStore.channel), version::text || ' ' || \(store.session))::text
                        FROM w
                        """, logger: store.logger)
                }
                for try await (version, _) in rows.decode((Int64, String).self) {
                    store.knownVersion.max(version, ordering: .relaxed)
                    return version
                }
                // Another host wrote a newer version: the compare and swap refused this one.
                store.metrics?.conflicts.increment()
                return nil
            }
        } catch {
            // The lock went with its connection: this host no longer holds it.
            store.metrics?.lockLosses.increment()
            throw SharedStoreError(store.explain(error))
        }
    }

    func release() async {
        guard released.withLock({ done in
            defer { done = true }
            return !done
        }) else { return }
        let store = self.store
        let connection = self.connection
        do {
            try await store.within(store.statementTimeout, on: connection, "releasing the fleet lock") {
                _ = try await connection.query(
                    "SELECT pg_advisory_unlock(\(FleetLock.classID), hashtext(\(store.session)))", logger: store.logger)
            }
        } catch {
            // Closing the connection releases the lock too.
            try? await connection.close()
        }
        store.turns.pass()
    }
}
