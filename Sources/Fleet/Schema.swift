import Logging
import PostgresWire

/// tokend's tables, created and migrated by tokend itself. `tokend_schema`
/// holds the version; a database at a newer version than this tokend knows
/// is refused (an older tokend must not write rows it does not understand).
///
/// Version 2 is the lease protocol: the session's row (`tokend_shared`)
/// carries its refresh lease. Hosts of version 1 took a session advisory lock
/// and wrote `tokend_sessions`; that name becomes a view they can still read
/// (and follow the fleet with) but whose writes PostgreSQL refuses, naming the
/// fix. A version 1 host therefore never refreshes beside a version 2 host:
/// tokend writes before it calls the token endpoint, and that write fails.
enum Schema {
    static let version = 2

    static let refusal =
        "this fleet's shared store uses tokend's lease protocol (schema 2): upgrade tokend on this host"

    /// Statements that bring the schema from version N-1 to N, by N.
    static let migrations: [Int: [String]] = [
        1: [
            """
            CREATE TABLE tokend_sessions (
                session text PRIMARY KEY,
                version bigint NOT NULL,
                generation bigint NOT NULL,
                record text NOT NULL,
                written_by text NOT NULL,
                written_at timestamptz NOT NULL DEFAULT now()
            )
            """
        ],
        2: [
            // Version 1 hosts hold this lock across their upstream call: wait for each to finish
            // (their result written), and keep them out until the view below refuses their writes.
            "SET LOCAL lock_timeout = '120s'",
            "SELECT pg_advisory_xact_lock(\(FleetLock.classID), hashtext(session)) FROM tokend_sessions ORDER BY session",
            """
            CREATE TABLE tokend_shared (
                session text PRIMARY KEY,
                version bigint NOT NULL,
                generation bigint NOT NULL,
                record text NOT NULL,
                written_by text NOT NULL,
                written_at timestamptz NOT NULL DEFAULT now(),
                lease_holder text,
                lease_epoch bigint NOT NULL DEFAULT 0,
                lease_expires timestamptz NOT NULL DEFAULT 'epoch'
            )
            """,
            """
            INSERT INTO tokend_shared (session, version, generation, record, written_by, written_at)
            SELECT session, version, generation, record, written_by, written_at FROM tokend_sessions
            """,
            "DROP TABLE tokend_sessions",
            """
            CREATE VIEW tokend_sessions AS
            SELECT session, version, generation, record, written_by, written_at FROM tokend_shared WHERE version > 0
            """,
            """
            CREATE FUNCTION tokend_refuse_lock_protocol() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION '\(refusal.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "''"))' USING ERRCODE = 'feature_not_supported'; END $$
            """,
            """
            CREATE TRIGGER tokend_refuse_lock_protocol INSTEAD OF INSERT OR UPDATE OR DELETE ON tokend_sessions
            FOR EACH ROW EXECUTE FUNCTION tokend_refuse_lock_protocol()
            """,
        ],
    ]

    /// Creates or migrates the schema: one read when it is current; otherwise
    /// one transaction under a transaction-scoped advisory lock, so that hosts
    /// starting together migrate one at a time and nothing outlives the
    /// transaction (a pooler hands the server connection on at COMMIT).
    static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        if let current = try? await installed(on: connection), current >= version {
            try refuseNewer(current)
            return
        }
        try await connection.query("BEGIN")
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(FleetLock.classID), 0)")
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS tokend_schema (version integer NOT NULL)")
            let current = try await installed(on: connection)
            try refuseNewer(current)
            if current < version {
                for step in (current + 1)...version {
                    for statement in migrations[step] ?? [] {
                        try await connection.query(PostgresQuery(unsafeSQL: statement))
                    }
                    try await connection.query("INSERT INTO tokend_schema (version) VALUES (\(step))")
                    logger.notice("shared store schema migrated", metadata: ["version": "\(step)"])
                }
            }
            try await connection.query("COMMIT")
        } catch {
            _ = try? await connection.query("ROLLBACK")
            throw error
        }
    }

    static func installed(on connection: PostgresConnection) async throws -> Int {
        var current = 0
        for version in try await connection.query("SELECT max(version) FROM tokend_schema").decode(Int?.self) {
            current = version ?? 0
        }
        return current
    }

    static func refuseNewer(_ current: Int) throws {
        guard current <= version else {
            throw SharedStoreSetupError(
                "the database's tokend schema is version \(current), newer than this tokend's (\(version)): "
                    + "upgrade tokend on this host")
        }
    }
}

enum FleetLock {
    /// The first key of tokend's advisory locks ("tokn"); the second is the
    /// session's hashtext (version 1 hosts) or 0 (the migration).
    static let classID: Int32 = 0x746f_6b6e
}
