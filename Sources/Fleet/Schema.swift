import Logging
import PostgresNIO

/// tokend's tables, created and migrated by tokend itself. `tokend_schema`
/// holds the version; a database at a newer version than this tokend knows
/// is refused (an older tokend must not write rows it does not understand).
enum Schema {
    static let version = 1

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
        ]
    ]

    /// Creates or migrates the schema, one host at a time (under an advisory lock).
    static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_lock(\(FleetLock.classID), 0)", logger: logger)
        do {
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS tokend_schema (version integer NOT NULL)", logger: logger)
            var current = 0
            for try await (version) in try await connection.query("SELECT max(version) FROM tokend_schema", logger: logger)
                .decode((Int?).self)
            {
                current = version ?? 0
            }
            guard current <= version else {
                throw SharedStoreSetupError(
                    "the database's tokend schema is version \(current), newer than this tokend's (\(version)): "
                        + "upgrade tokend on this host")
            }
            if current < version {
                for step in (current + 1)...version {
                    try await connection.query("BEGIN", logger: logger)
                    for statement in migrations[step] ?? [] {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query("INSERT INTO tokend_schema (version) VALUES (\(step))", logger: logger)
                    try await connection.query("COMMIT", logger: logger)
                    logger.notice("shared store schema migrated", metadata: ["version": "\(step)"])
                }
            }
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(FleetLock.classID), 0)", logger: logger)
            throw error
        }
        try await connection.query("SELECT pg_advisory_unlock(\(FleetLock.classID), 0)", logger: logger)
    }
}

enum FleetLock {
    /// The first key of tokend's advisory locks ("tokn"); the second is the session's hashtext.
    static let classID: Int32 = 0x746f_6b6e
}
