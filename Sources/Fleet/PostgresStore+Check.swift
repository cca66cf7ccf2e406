import Broker
import Logging
import PostgresNIO

/// What the store said about itself when this host asked: the role's missing
/// privileges on tokend's tables, and what stands between this host and
/// PostgreSQL. Asked once the schema is checked, again every 10 minutes (when
/// status is read) and after a statement refused for privileges (SQLSTATE
/// 42501), so `tokenctl doctor` can say it in words without a connection of its own.
struct StoreFacts: Sendable, Equatable {
    var user: String
    var missing: [String: [String]]
    var pooler: Pooler
    var asked: ContinuousClock.Instant
}

/// What a pair of client connections shows about the server connections behind them.
enum Pooler: String, Sendable, Equatable {
    case direct, transaction, session, unknown

    /// `first` and `second` are the backend pids two client connections, open at once, saw for one
    /// statement each, one after the other; `again` is the first's pid for a second statement.
    /// A pooler in transaction mode hands the server connection the first gave back to the second
    /// (PgBouncer reuses the most recently used one); in session mode the first keeps its own. The
    /// server's port tells a pooler from PostgreSQL itself: PgBouncer reaches PostgreSQL on another
    /// port or by its Unix socket (nil).
    static func judge(first: Int32, second: Int32, again: Int32, serverPort: Int?, ourPort: Int) -> Pooler {
        if first == second { return .transaction }
        guard first == again else { return .unknown }
        return serverPort == ourPort ? .direct : .session
    }
}

extension PostgresStore {
    static let checkEvery = Duration.seconds(600)
    /// tokend's tables and the privileges a host uses on each.
    static let checkedTables = ["tokend_shared", "tokend_schema"]

    /// Asks the store again if the last answer is older than `checkEvery` (or there is none), in the background.
    func checkIfDue(now: ContinuousClock.Instant = .now) {
        let due = sightings.withLock { seen -> Bool in
            guard !seen.checking, schemaReady.withLock({ $0 }) else { return false }
            guard seen.check.map({ now - $0.asked >= Self.checkEvery }) ?? true else { return false }
            seen.checking = true
            return true
        }
        if due { Task { await self.check() } }
    }

    /// Asks after a refused statement: at once if the last answer found nothing missing, else at
    /// most every 30 s (a host refused at every poll asks no more often).
    func checkAfterRefusal(now: ContinuousClock.Instant = .now) {
        let start = sightings.withLock { seen -> Bool in
            guard !seen.checking else { return false }
            guard seen.check.map({ $0.missing.isEmpty || now - $0.asked >= .seconds(30) }) ?? true else { return false }
            seen.checking = true
            return true
        }
        if start { Task { await self.check() } }
    }

    func check() async {
        defer { sightings.withLock { $0.checking = false } }
        do {
            let facts = try await askStore()
            let before = sightings.withLock { seen -> StoreFacts? in
                defer { seen.check = facts }
                return seen.check
            }
            guard before?.missing != facts.missing || before?.pooler != facts.pooler else { return }
            if !facts.missing.isEmpty {
                let said = facts.missing.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value.joined(separator: ", ")))" }
                logger.error(
                    "the store's role lacks privileges tokend uses", metadata: ["user": "\(facts.user)", "missing": "\(said.joined(separator: "; "))"])
            }
            if facts.pooler == .session {
                logger.warning("the store is reached through a pooler in session mode: each host pins a server connection while connected")
            }
        } catch {
            logger.notice("could not ask the store about itself", metadata: ["problem": "\(explain(error))"])
        }
    }

    /// One statement for the privileges, and the pooler probe: a second client connection, open for
    /// one statement, beside the link's (three tries: a pooler busy with other hosts may hand the
    /// second another server connection once).
    func askStore() async throws -> StoreFacts {
        let (logger, link, ourPort) = (logger, link, address.port)
        let tables = Self.checkedTables
        return try await run("asking the store about itself") { connection in
            let rows = try await connection.query(
                """
                SELECT current_user::text, t,
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'SELECT'), false),
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'INSERT'), false),
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'UPDATE'), false)
                FROM unnest(\(tables)::text[]) AS t
                """, logger: logger)
            var user = "?"
            var missing: [String: [String]] = [:]
            for try await (who, table, select, insert, update) in rows.decode((String, String, Bool, Bool, Bool).self) {
                user = who
                let lacking = [("SELECT", select), ("INSERT", insert), ("UPDATE", update)].filter { !$0.1 }.map(\.0)
                if !lacking.isEmpty { missing[table] = lacking }
            }
            let other = try await link.open(id: -1_000_000)
            do {
                var pooler = Pooler.unknown
                for _ in 0..<3 {
                    let (first, port) = try await Self.backend(connection, logger: logger)
                    let (second, _) = try await Self.backend(other, logger: logger)
                    let (again, _) = try await Self.backend(connection, logger: logger)
                    pooler = Pooler.judge(first: first, second: second, again: again, serverPort: port, ourPort: ourPort)
                    if pooler != .session && pooler != .unknown { break }
                }
                try? await other.close()
                return StoreFacts(user: user, missing: missing, pooler: pooler, asked: .now)
            } catch {
                try? await other.close()
                throw error
            }
        }
    }

    static func backend(_ connection: PostgresConnection, logger: Logger) async throws -> (Int32, Int?) {
        let rows = try await connection.query("SELECT pg_backend_pid(), inet_server_port()", logger: logger)
        for try await (pid, port) in rows.decode((Int32, Int32?).self) { return (pid, port.map(Int.init)) }
        throw SharedStoreError("the store answered no row to SELECT pg_backend_pid()")
    }
}
