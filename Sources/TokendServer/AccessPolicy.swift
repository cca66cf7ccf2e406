import Config
import Foundation
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Which calls a peer (from SO_PEERCRED) may make. Names are resolved to ids
/// when the policy is built (at start and on reload); a peer's groups are
/// its primary gid plus its supplementary groups from the group database.
struct AccessPolicy: Sendable {
    enum MethodClass: String, Sendable {
        case read, admin
    }

    /// Who may make calls of each class; admins are included in read.
    let adminUIDs: Set<UInt32>
    let adminGIDs: Set<UInt32>
    let readerUIDs: Set<UInt32>
    let readerGIDs: Set<UInt32>

    /// Throws a description naming an unknown user or group.
    init(_ settings: AccessSettings) throws {
        adminUIDs = Set(try (settings.adminUsers ?? ["0", String(getuid())]).map(Self.uid))
        adminGIDs = Set(try settings.adminGroups.map(Self.gid))
        readerUIDs = adminUIDs.union(try settings.readUsers.map(Self.uid))
        readerGIDs = adminGIDs.union(try (settings.readGroups ?? [String(getgid())]).map(Self.gid))
    }

    static func methodClass(_ member: String) -> MethodClass {
        switch member {
        case "Login", "Logout": .admin
        default: .read
        }
    }

    /// Cheap checks (uid, primary gid) first; the group database is read
    /// only for a peer that only a supplementary group could admit.
    func allows(_ peer: PeerCredentials?, _ wanted: MethodClass) -> Bool {
        guard let peer else { return false }
        let uids = wanted == .read ? readerUIDs : adminUIDs
        let gids = wanted == .read ? readerGIDs : adminGIDs
        if uids.contains(peer.uid) || gids.contains(peer.gid) { return true }
        guard !gids.isEmpty else { return false }
        return !gids.isDisjoint(with: Self.groups(of: peer))
    }

    /// Primary gid plus supplementary groups of the peer's user, if it has an entry.
    static func groups(of peer: PeerCredentials) -> Set<UInt32> {
        var result: Set<UInt32> = [peer.gid]
        var entry = passwd()
        var buffer = [CChar](repeating: 0, count: 4096)
        var found: UnsafeMutablePointer<passwd>?
        guard getpwuid_r(peer.uid, &entry, &buffer, buffer.count, &found) == 0, let found, let name = found.pointee.pw_name
        else { return result }
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, peer.gid, &list, &count) == -1 {
            list = [gid_t](repeating: 0, count: Int(count))
            _ = getgrouplist(name, peer.gid, &list, &count)
        }
        result.formUnion(list.prefix(Int(max(0, count))))
        return result
    }

    static func uid(_ name: String) throws -> UInt32 {
        if let id = UInt32(name) { return id }
        guard let entry = getpwnam(name) else { throw DaemonSetupError("access: no user named \"\(name)\"") }
        return entry.pointee.pw_uid
    }

    static func gid(_ name: String) throws -> UInt32 {
        if let id = UInt32(name) { return id }
        guard let entry = getgrnam(name) else { throw DaemonSetupError("access: no group named \"\(name)\"") }
        return entry.pointee.gr_gid
    }
}
