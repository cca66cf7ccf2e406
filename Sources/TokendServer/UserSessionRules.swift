import Config
import Varlink

/// What the access policy knows of the sessions users added: whose each is,
/// the names each person gave, and who may add them ([user-sessions]).
struct UserSessionRules: Sendable {
    /// Full name (USER/NAME) → the owner's person.
    var owners: [String: UInt32] = [:]
    /// Person → the bare names they gave → full names.
    var names: [UInt32: [String: String]] = [:]
    /// Who may add sessions: uids (a person's own uid counts for its subordinate uids) and gids.
    var uids: Set<UInt32> = []
    var gids: Set<UInt32> = []

    init() {}

    /// Throws a description naming an unknown user or group.
    init(_ settings: UserSessionSettings, records: [UserSessionRecord]) throws {
        uids = Set(try settings.users.map(AccessPolicy.uid))
        gids = Set(try settings.groups.map(AccessPolicy.gid))
        for record in records {
            owners[record.fullName] = record.owner
            names[record.owner, default: [:]][record.name] = record.fullName
        }
    }

    /// Whether `peer` may add sessions of its own.
    func mayAdd(_ peer: PeerCredentials) -> Bool {
        if uids.contains(peer.uid) || uids.contains(peer.person) || gids.contains(peer.gid) { return true }
        return peer.groups.contains { gids.contains($0) }
    }

    /// Admitted at accept for this alone: it has, or may add, sessions of its own.
    func standing(of peer: PeerCredentials) -> Bool { names[peer.person] != nil || mayAdd(peer) }
}
