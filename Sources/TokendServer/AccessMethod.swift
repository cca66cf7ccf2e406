import Broker
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// GetAccess: what a user may do with each session, read from the policy in force
/// (`tokenctl access`). Open to every admitted caller about itself; about another
/// user only to root and the global admins.
func accessMethods(_ broker: Broker, policy: @escaping @Sendable () -> AccessPolicy) -> [String: MethodHandler] {
    typealias I = BrokerInterface
    return [
        "GetAccess": .call { parameters, context in
            let call = try parameters.decode(I.GetAccess.In.self)
            guard let caller = context.peer else { throw VarlinkError.permissionDenied }
            let policy = policy()
            let admin = caller.uid == 0 || policy.allows(caller, .admin, session: nil)
            var peer = caller
            var name = AccessPolicy.userName(caller.uid)
            if let user = call.user {
                guard let (other, otherName) = AccessPolicy.credentials(ofUser: user) else {
                    throw VarlinkError.invalidParameter("user")
                }
                if other.uid != caller.uid {
                    guard admin else { throw VarlinkError.permissionDenied }
                    peer = other
                }
                name = otherName
            }
            let sessions: [SessionActor]
            if let given = call.session {
                // A bare name is the caller's own session first; another person's is not there.
                let session = policy.resolve(given, for: caller)
                if policy.hides(session, from: caller) {
                    throw VarlinkError(BrokerInterface.Error.noSuchSession, ["session": .string(session)])
                }
                sessions = [try broker.session(session)]
            } else {
                // Sessions are listed to whoever may read them; an admin asking sees every one.
                sessions = broker.all.sorted { $0.name < $1.name }
                    .filter { policy.lists($0.name, to: caller) || (admin && !AccessPolicy.isUsers($0.name)) }
            }
            return try I.GetAccess.Out(
                uid: Int(peer.uid), user: name, sessions: sessions.map { policy.access(of: peer, to: $0) }
            ).parameters()
        }
    ]
}

extension AccessPolicy {
    /// What `peer` may do with `session`.
    func access(of peer: PeerCredentials, to session: SessionActor) -> BrokerInterface.SessionAccess {
        let name = session.name
        let read = allows(peer, .read, session: name)
        return BrokerInterface.SessionAccess(
            session: name, read: read, login: allows(peer, .admin, session: name),
            cookiesWrite: allows(peer, .cookiesWrite, session: name), share: read,
            pages: read ? session.webOrigins : [],
            deniedResources: session.keyPolicy.resources.filter { !allows(peer, resource: $0, session: name) })
    }

    /// Another user as the user and group databases give them (uid, primary gid, supplementary
    /// groups), for `user` a name or a uid; nil when there is no such user.
    static func credentials(ofUser user: String) -> (PeerCredentials, String)? {
        guard let entry = UInt32(user).map({ getpwuid($0) }) ?? getpwnam(user) else { return nil }
        let uid = entry.pointee.pw_uid
        let gid = entry.pointee.pw_gid
        let name = String(cString: entry.pointee.pw_name)
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, gid, &groups, &count) == -1 {
            groups = [gid_t](repeating: 0, count: Int(count))
            if getgrouplist(name, gid, &groups, &count) == -1 { count = 0 }
        }
        return (PeerCredentials(pid: 0, uid: uid, gid: gid, groups: Array(groups.prefix(Int(max(0, count))))), name)
    }

    static func userName(_ uid: UInt32) -> String {
        guard let entry = getpwuid(uid) else { return String(uid) }
        return String(cString: entry.pointee.pw_name)
    }
}
