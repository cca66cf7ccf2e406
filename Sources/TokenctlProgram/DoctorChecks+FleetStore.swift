import TokendInterface

/// What tokend found when it asked its fleet store about itself (status's
/// fleet.check): the privileges its role lacks, and a pooler in session mode.
/// tokend asks with its own connection and password; doctor needs neither.
extension DoctorFleetCheck {
    static func judgeStore(_ fleet: BrokerInterface.FleetStatus?, session: String) -> [DoctorResult] {
        let grants = "fleet store grants (\(session))"
        let pooler = "fleet store pooler (\(session))"
        guard let check = fleet?.check else {
            let why = fleet == nil ? "tokend did not say (not running, or this user may not read the session)"
                : "tokend has not reached the store yet"
            return [.skip(grants, why), .skip(pooler, why)]
        }
        return [judgeGrants(check, check: grants), judgePooler(check.pooler, check: pooler)]
    }

    static func judgeGrants(_ store: BrokerInterface.StoreCheck, check: String) -> DoctorResult {
        let lacking = store.missing.filter { !$0.privileges.isEmpty }
        guard !lacking.isEmpty else { return .ok(check, "\(store.user) may read and write tokend's tables") }
        let privileges = ["SELECT", "INSERT", "UPDATE"].filter { p in lacking.contains { $0.privileges.contains(p) } }
        let said = lacking.map { "\($0.table) (\($0.privileges.joined(separator: ", ")))" }.joined(separator: "; ")
        return .fail(
            check, "\(store.user) lacks privileges on \(said): tokend's statements fail with SQLSTATE 42501 (insufficient_privilege)",
            fix: "the DBA runs: GRANT \(privileges.joined(separator: ", ")) ON \(lacking.map(\.table).joined(separator: ", ")) TO \(store.user);")
    }

    static func judgePooler(_ pooler: String, check: String) -> DoctorResult {
        switch pooler {
        case "direct":
            return .ok(
                check, "each connection has a PostgreSQL backend of its own, on the port this host connects to: no pooler (or one in session mode on the database's own port); a host holds a backend only while it runs statements")
        case "transaction":
            return .ok(check, "a pooler in transaction mode: hosts share the pool's server connections")
        case "session":
            return .warn(
                check, "each connection has a server connection of its own, and PostgreSQL answers on another port: a pooler in session mode: each host pins one server connection while it is connected, so the pool, not PostgreSQL, caps the fleet (or a port forward or tunnel, which is fine)",
                fix: "pool_mode = transaction for tokend's database in the pooler's configuration, if it is a pooler (tokend keeps no session state)")
        default:
            return .ok(check, "a pooler, or a proxy, whose mode two probe connections could not tell (server_round_robin?)")
        }
    }
}
