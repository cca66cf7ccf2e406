import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Whether this user may sign a session in (tokend's admin class: Login and
/// BeginLogin), and who may, in words, decided as tokend decides it from
/// tokend.toml's [access] tables: admin-users (default: root and the user
/// tokend runs as) and admin-groups. tokend still decides each call: a
/// judgement made from a file tokend has not reloaded yet is corrected when
/// BeginLogin is refused.
struct AgentAuthority: Equatable, Sendable {
    /// This user as the kernel tells tokend: uid, primary and supplementary groups.
    struct Person: Equatable, Sendable {
        var uid: UInt32
        var gid: UInt32
        var groups: [UInt32]

        static func current() -> Person {
            let count = getgroups(0, nil)
            var groups = [gid_t](repeating: 0, count: Int(max(count, 0)))
            let found = count > 0 ? getgroups(count, &groups) : 0
            return Person(uid: getuid(), gid: getgid(), groups: Array(groups.prefix(Int(max(found, 0)))))
        }
    }

    /// nil: the access tables could not be read; tokend is asked when the user chooses to sign in.
    let tables: AccessTables?
    /// The uid tokend runs as (its socket's peer), the default admin besides root.
    let tokendUID: UInt32?
    let person: Person

    /// `owner`: a session a user added (its status names the owner), which its owner alone signs in;
    /// tokend.toml's tables do not apply to it.
    func mayLogIn(_ session: String, owner: String? = nil) -> Bool {
        if let owner { return isThisPerson(owner) }
        guard let tables else { return true }
        let (users, groups) = admins(tables.settings(for: session))
        if users.contains(person.uid) { return true }
        return ([person.gid] + person.groups).contains { groups.contains($0) }
    }

    /// "root, alice or a member of group wheel".
    func whoMay(_ session: String, owner: String? = nil) -> String {
        if let owner { return owner }
        guard let tables else { return "tokend's administrators" }
        let (users, groups) = admins(tables.settings(for: session))
        let names = users.sorted().map(Self.userName) + groups.sorted().map { "a member of group \(CredentialFile.groupName($0))" }
        guard names.count > 1 else { return names.first ?? "no one (admin-users and admin-groups are empty)" }
        return names.dropLast().joined(separator: ", ") + " or " + names.last!
    }

    /// Whether this user's agent speaks of a session: not of another person's, which only an
    /// administrator lists, and whose sign-in is that person's to hear of.
    func concerns(owner: String?) -> Bool {
        owner.map(isThisPerson) ?? true
    }

    /// tokend names an owner by user name, or by uid when the uid has none.
    private func isThisPerson(_ owner: String) -> Bool {
        owner == String(person.uid) || owner == Self.userName(person.uid)
    }

    private func admins(_ access: AccessSettings) -> (users: Set<UInt32>, groups: Set<UInt32>) {
        let users = access.adminUsers ?? ["0"] + (tokendUID.map { [String($0)] } ?? [])
        return (Set(users.compactMap(Self.uid)), Set((access.adminGroups ?? []).compactMap(Self.gid)))
    }

    static func uid(_ name: String) -> UInt32? {
        UInt32(name) ?? getpwnam(name).map { $0.pointee.pw_uid }
    }

    static func gid(_ name: String) -> UInt32? {
        UInt32(name) ?? getgrnam(name).map { $0.pointee.gr_gid }
    }

    static func userName(_ uid: UInt32) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }
}
