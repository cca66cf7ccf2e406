import Broker
import Deadline
import Logging
import PostgresWire

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
    /// port or by its Unix socket (nil). A port forward reads as a session pooler, and a session pooler
    /// on the database's own port as PostgreSQL: doctor's words say so.
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

    /// Asks the store again, in the background, when the next ask is due: `checkEvery` ± 10 % after
    /// one that answered (a fleet started together does not ask together), 30 s doubling to
    /// `checkEvery` after one that failed.
    func checkIfDue(now: ContinuousClock.Instant = .now) {
        let due = sightings.withLock { seen -> Bool in
            guard !seen.checking, schemaReady.withLock({ $0 }) else { return false }
            guard seen.nextCheck.map({ now >= $0 }) ?? true else { return false }
            seen.checking = true
            return true
        }
        if due { Task { await self.check() } }
    }

    /// Asks after a statement refused for privileges, if the last ask answered and found nothing
    /// missing, at most once a minute (a store refusing every poll is not asked at every poll); else
    /// when due. The schema must be ready: a refused migration is said by the migration.
    func checkAfterRefusal(now: ContinuousClock.Instant = .now) {
        let soon = sightings.withLock { seen -> Bool in
            guard seen.checkBackoff == .zero, seen.check?.missing.isEmpty ?? false,
                seen.refusalCheck.map({ now - $0 >= .seconds(60) }) ?? true
            else { return false }
            seen.refusalCheck = now
            seen.nextCheck = now
            return true
        }
        if soon { checkIfDue(now: now) }
    }

    func check() async {
        let facts: StoreFacts
        do {
            facts = try await askStore()
        } catch {
            sightings.withLock { seen in
                seen.checkBackoff = min(max(seen.checkBackoff * 2, .seconds(30)), Self.checkEvery)
                seen.nextCheck = .now + seen.checkBackoff
                seen.checking = false
            }
            logger.notice("could not ask the store about itself", metadata: ["problem": "\(explain(error))"])
            return
        }
        let before = sightings.withLock { seen -> StoreFacts? in
            defer {
                seen.check = facts
                seen.checkBackoff = .zero
                seen.nextCheck = .now + Self.checkEvery * Double.random(in: 0.9...1.1)
                seen.checking = false
            }
            return seen.check
        }
        guard before?.missing != facts.missing || before?.pooler != facts.pooler else { return }
        if !facts.missing.isEmpty {
            let said = facts.missing.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value.joined(separator: ", ")))" }
            logger.error(
                "the store's role lacks privileges tokend uses",
                metadata: ["user": "\(facts.user)", "missing": "\(said.joined(separator: "; "))"])
        }
        if facts.pooler == .session {
            logger.warning(
                "each connection to the store keeps a server connection of its own, reached on another port: a pooler in session mode (or a port forward)")
        }
    }

    /// The privileges, then the pooler probe, on two connections of the check's own (the link's, which
    /// renewals and writes use, is never held or dropped by it), within 10 s in all. A probe that fails
    /// leaves the privileges answered and the pooler unknown.
    func askStore() async throws -> StoreFacts {
        let (link, ourPort, tables) = (link, address.port, Self.checkedTables)
        let asked = try await Deadline.within(.seconds(10)) { () async throws -> StoreFacts in
            let first = try await link.open(id: -1_000_000)
            defer { Task { try? await first.close() } }
            let rows = try await first.query(
                """
                SELECT current_user::text, t,
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'SELECT'), false),
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'INSERT'), false),
                    coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'UPDATE'), false)
                FROM unnest(\(tables)::text[]) AS t
                """)
            var user = "?"
            var missing: [String: [String]] = [:]
            for (who, table, select, insert, update) in try rows.decode((String, String, Bool, Bool, Bool).self) {
                user = who
                let lacking = [("SELECT", select), ("INSERT", insert), ("UPDATE", update)].filter { !$0.1 }.map(\.0)
                if !lacking.isEmpty { missing[table] = lacking }
            }
            let pooler = (try? await Self.probePooler(first, link: link, ourPort: ourPort)) ?? .unknown
            return StoreFacts(user: user, missing: missing, pooler: pooler, asked: .now)
        }
        guard let asked else { throw SharedStoreError("asking the store about itself took more than 10 s") }
        return asked
    }

    /// Up to three tries; a try that shows a transaction pooler or a direct connection settles it.
    static func probePooler(_ first: PostgresConnection, link: StoreLink, ourPort: Int) async throws -> Pooler {
        let second = try await link.open(id: -1_000_001)
        defer { Task { try? await second.close() } }
        var pooler = Pooler.unknown
        for _ in 0..<3 {
            let (one, port) = try await backend(first)
            let (two, _) = try await backend(second)
            let (again, _) = try await backend(first)
            pooler = Pooler.judge(first: one, second: two, again: again, serverPort: port, ourPort: ourPort)
            if pooler == .transaction || pooler == .direct { break }
        }
        return pooler
    }

    static func backend(_ connection: PostgresConnection) async throws -> (Int32, Int?) {
        let rows = try await connection.query("SELECT pg_backend_pid(), inet_server_port()")
        for (pid, port) in try rows.decode((Int32, Int32?).self) { return (pid, port.map(Int.init)) }
        throw SharedStoreError("the store answered no row to SELECT pg_backend_pid()")
    }
}
