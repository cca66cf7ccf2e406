import Dispatch
import Fleet
import Foundation
import Logging
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// Whether the store's user may do what tokend does on its tables: asked of
/// the database itself (has_table_privilege), read-only, one connection.
extension DoctorFleetCheck {
    /// tokend's tables and the privileges a host uses on each.
    static let tables = ["tokend_shared", "tokend_schema"]

    /// What the database answered: the tables' missing privileges, or why it could not be asked.
    enum GrantFacts: Equatable, Sendable {
        /// Table → missing privileges; a table absent from the map has none missing. `absent`: tables not created yet.
        case answered(user: String, missing: [String: [String]], absent: [String], mayCreate: Bool)
        case unreachable(String)
    }

    static func judgeGrants(_ facts: GrantFacts, session: String) -> DoctorResult {
        let check = "fleet store grants (\(session))"
        switch facts {
        case .unreachable(let why):
            return .skip(check, "not asked: \(why)")
        case .answered(let user, let missing, let absent, let mayCreate):
            if !absent.isEmpty && !mayCreate {
                return .fail(
                    check, "\(absent.joined(separator: ", ")) not created yet, and \(user) may not create tables (SQLSTATE 42501 at tokend's first start)",
                    fix: "GRANT CREATE ON SCHEMA public TO \(user); (or create tokend's tables as their owner)")
            }
            let lacking = tables.filter { !(missing[$0] ?? []).isEmpty }
            guard !lacking.isEmpty else {
                return .ok(check, absent.isEmpty ? "\(user) may read and write tokend's tables" : "\(user) may create tokend's tables")
            }
            let privileges = ["SELECT", "INSERT", "UPDATE"].filter { p in lacking.contains { missing[$0]!.contains(p) } }
            let said = lacking.map { "\($0) (\(missing[$0]!.joined(separator: ", ")))" }.joined(separator: "; ")
            return .fail(
                check, "\(user) lacks privileges on \(said): tokend fails with SQLSTATE 42501 (insufficient_privilege)",
                fix: "the DBA runs: GRANT \(privileges.joined(separator: ", ")) ON \(lacking.joined(separator: ", ")) TO \(user);")
        }
    }

    /// Asks the store, within `limit`; the password read from the session's password file, if any.
    static func probeGrants(_ address: StoreAddress, password: String?, limit: Duration = .seconds(10)) -> GrantFacts {
        let answer = Mutex<GrantFacts?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let facts: GrantFacts
            do { facts = try await askGrants(address, password: password) } catch { facts = .unreachable(describe(error, address)) }
            answer.withLock { $0 = facts }
            done.signal()
        }
        guard done.wait(timeout: .now() + .seconds(Int(limit.components.seconds))) == .success else {
            return .unreachable("no answer from \(address.host):\(address.port) within \(limit.components.seconds) s")
        }
        return answer.withLock { $0 } ?? .unreachable("no answer")
    }

    static func describe(_ error: any Error, _ address: StoreAddress) -> String {
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            return "\(message) (SQLSTATE \(error.serverInfo?[.sqlState] ?? "?"))"
        }
        if let error = error as? PSQLError { return "\(error.code)\(error.underlying.map { ": \($0)" } ?? "")" }
        return "\(error)"
    }

    static func askGrants(_ address: StoreAddress, password: String?) async throws -> GrantFacts {
        var logger = Logger(label: "tokenctl.doctor")
        logger.logLevel = .critical
        var configuration = PostgresConnection.Configuration(
            host: address.host, port: address.port, username: address.user, password: password,
            database: address.database, tls: try tls(address))
        configuration.options.additionalStartupParameters = [("application_name", "tokenctl doctor")]
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            let facts = try await grants(on: connection, logger: logger)
            try? await connection.close()
            return facts
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// One autocommit statement (works through a transaction pooler): per table, whether it exists and each privilege.
    static func grants(on connection: PostgresConnection, logger: Logger) async throws -> GrantFacts {
        let rows = try await connection.query(
            """
            SELECT current_user::text, t, to_regclass(t) IS NOT NULL,
                coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'SELECT'), false),
                coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'INSERT'), false),
                coalesce(to_regclass(t) IS NOT NULL AND has_table_privilege(t, 'UPDATE'), false),
                has_schema_privilege(current_schema(), 'CREATE')
            FROM unnest(ARRAY['tokend_shared', 'tokend_schema']) AS t
            """, logger: logger)
        var user = "?"
        var missing: [String: [String]] = [:]
        var absent: [String] = []
        var mayCreate = false
        for try await (who, table, exists, select, insert, update, create)
            in rows.decode((String, String, Bool, Bool, Bool, Bool, Bool).self)
        {
            (user, mayCreate) = (who, create)
            guard exists else {
                absent.append(table)
                continue
            }
            missing[table] = [("SELECT", select), ("INSERT", insert), ("UPDATE", update)].filter { !$0.1 }.map(\.0)
        }
        return .answered(user: user, missing: missing, absent: absent, mayCreate: mayCreate)
    }

    /// sslmode as tokend applies it (Fleet's StoreAddress.tls(), which is not public).
    static func tls(_ address: StoreAddress) throws -> PostgresConnection.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch address.sslMode {
        case "disable": return .disable
        case "prefer", "require": tls.certificateVerification = .none
        case "verify-ca": tls.certificateVerification = .noHostnameVerification
        default: tls.certificateVerification = .fullVerification
        }
        if let root = address.rootCertificate { tls.trustRoots = .file(root) }
        let context = try NIOSSLContext(configuration: tls)
        return address.sslMode == "prefer" ? .prefer(context) : .require(context)
    }
}
