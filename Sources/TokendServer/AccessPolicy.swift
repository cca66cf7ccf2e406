import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import UnixServer
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Which calls a peer (from SO_PEERCRED) may make, globally and per session.
/// Names are resolved to ids when the policy is built (at start and on
/// reload); a peer's groups are those its process had when it connected.
struct AccessPolicy: Sendable {
    enum MethodClass: String, Sendable {
        case read
        case cookiesWrite = "cookies-write"
        case admin
    }

    /// The uids and gids admitted to each class; wider classes include the narrower ones' members.
    struct Rules: Sendable {
        let uids: [MethodClass: Set<UInt32>]
        let gids: [MethodClass: Set<UInt32>]

        init(_ settings: AccessSettings) throws {
            let adminUIDs = Set(try (settings.adminUsers ?? ["0", String(getuid())]).map(AccessPolicy.uid))
            let adminGIDs = Set(try (settings.adminGroups ?? []).map(AccessPolicy.gid))
            let writerUIDs = adminUIDs.union(try (settings.cookiesWriteUsers ?? []).map(AccessPolicy.uid))
            let writerGIDs = adminGIDs.union(try (settings.cookiesWriteGroups ?? []).map(AccessPolicy.gid))
            uids = [
                .admin: adminUIDs, .cookiesWrite: writerUIDs,
                .read: writerUIDs.union(try (settings.readUsers ?? []).map(AccessPolicy.uid)),
            ]
            gids = [
                .admin: adminGIDs, .cookiesWrite: writerGIDs,
                .read: writerGIDs.union(try (settings.readGroups ?? [String(getgid())]).map(AccessPolicy.gid)),
            ]
        }

        /// By uid, primary gid and the supplementary groups the kernel
        /// recorded when the peer connected: no user or group database look-up.
        func allows(_ peer: PeerCredentials, _ wanted: MethodClass) -> Bool {
            let gids = self.gids[wanted]!
            if self.uids[wanted]!.contains(peer.uid) || gids.contains(peer.gid) { return true }
            return peer.groups.contains { gids.contains($0) }
        }
    }

    let global: Rules
    let sessions: [String: Rules]
    /// The global rules and every session's own, for `standing` (made once, not per accept).
    let everyRules: [Rules]
    /// Who may have tokens for a resource, by session and resource
    /// (resource-access); a resource not named is open to the session's readers.
    let resources: [String: [String: Rules]]
    /// The same as configured (names, not ids), for status.
    let resourceAccess: [String: [String: AccessSettings]]
    /// Sessions users added, and who may add them (UserSessionRules).
    var users = UserSessionRules()

    /// Throws a description naming an unknown user or group.
    init(_ settings: AccessSettings, sessions: [SessionSettings] = []) throws {
        global = try Rules(settings)
        var perSession: [String: Rules] = [:]
        for session in sessions {
            guard let own = session.access else { continue }
            perSession[session.name] = try Rules(own.over(settings))
        }
        self.sessions = perSession
        everyRules = [global] + Array(perSession.values)
        var resources: [String: [String: Rules]] = [:]
        for session in sessions where !session.resourceAccess.isEmpty {
            resources[session.name] = try session.resourceAccess.mapValues(Rules.init)
        }
        self.resources = resources
        resourceAccess = Dictionary(
            sessions.filter { !$0.resourceAccess.isEmpty }.map { ($0.name, $0.resourceAccess) }, uniquingKeysWith: { a, _ in a })
    }

    /// Whether the peer may have tokens for `resource` of `session` (reading the session is checked apart).
    func allows(_ peer: PeerCredentials?, resource: String, session: String) -> Bool {
        guard let rules = resources[session]?[resource] else { return true }
        guard let peer else { return false }
        return rules.allows(peer, .read)
    }

    /// Whether the peer may have tokens for every resource resource-access limits: what
    /// any token of a session whose one token serves all its resources needs.
    func allowsEveryResource(_ peer: PeerCredentials?, session: String) -> Bool {
        (resources[session] ?? [:]).keys.allSatisfy { allows(peer, resource: $0, session: session) }
    }

    static func methodClass(_ member: String) -> MethodClass {
        switch member {
        case "Login", "Logout", "BeginLogin", "FinishLogin", "CancelLogin", "ResetStrategy": .admin
        case "ImportCookies", "DeleteCookies": .cookiesWrite
        default: .read
        }
    }

    /// USER/NAME, a session a user added: no name in tokend.toml has a "/".
    static func isUsers(_ session: String) -> Bool { session.contains("/" as Character) }

    /// `session` nil: a call about no session (ListSessions), judged by the global rules.
    /// A session a user added: its owner (the person) may make every call, and nobody else any.
    func allows(_ peer: PeerCredentials?, _ wanted: MethodClass, session: String?) -> Bool {
        guard let peer else { return false }
        // USER/NAME is a user's: its owner's, and (no owner known) nobody's, never tokend.toml's rules'.
        if let session, Self.isUsers(session) { return users.owners[session] == peer.person }
        let rules = session.flatMap { sessions[$0] } ?? global
        return rules.allows(peer, wanted)
    }

    /// ListSessions: a global reader, or a person with (or allowed) sessions of their own.
    func mayList(_ peer: PeerCredentials?) -> Bool {
        guard let peer else { return false }
        return global.allows(peer, .read) || users.standing(of: peer)
    }

    /// Whether a session a user added is listed to `peer`: to its owner and to tokend's administrators.
    func lists(_ session: String, to peer: PeerCredentials?) -> Bool {
        guard let peer else { return false }
        guard Self.isUsers(session) else { return allows(peer, .read, session: session) }
        return users.owners[session] == peer.person || global.allows(peer, .admin)
    }

    /// The session a call's name means for `peer`: a bare name is the peer's own session of that
    /// name when it has one, else tokend.toml's.
    func resolve(_ name: String, for peer: PeerCredentials?) -> String {
        guard let peer, !Self.isUsers(name), let own = users.names[peer.person]?[name] else { return name }
        return own
    }

    /// Whether `session` is a user's session that is not `peer`'s: for the caller it is not there
    /// (NoSuchSession, whether or not it exists, so that its existence does not show).
    func hides(_ session: String, from peer: PeerCredentials?) -> Bool {
        Self.isUsers(session) && (peer == nil || users.owners[session] != peer!.person)
    }

    /// Decided once at accept: an admin anywhere gets the admins' reserved
    /// slots; a peer that may read nothing anywhere holds no slot at all
    /// (unless it has, or may add, sessions of its own).
    func standing(of peer: PeerCredentials?) -> VarlinkServer.Standing {
        guard let peer else { return .refused(.permissionDenied) }
        if everyRules.contains(where: { $0.allows(peer, .admin) }) { return .admin }
        if everyRules.contains(where: { $0.allows(peer, .read) }) || users.standing(of: peer) { return .caller }
        return .refused(.permissionDenied)
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
