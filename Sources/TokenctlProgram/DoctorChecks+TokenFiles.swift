import Glibc

/// Token files (token-files): present while the session has a token, with
/// the configured mode and group, writable by no one but tokend.
enum DoctorTokenFileCheck {
    static func judge(
        _ file: DoctorSetup.TokenFile, found: FileFacts?, session: String, hasToken: Bool?, groupID: UInt32?
    ) -> DoctorResult {
        let check = "token file (\(session))"
        let mode = String.octalMode(file.mode)
        guard let found else {
            if hasToken == true {
                return .fail(
                    check, "\(file.path) is missing while the session has a token",
                    fix: "tokenctl refresh --session \(session) rewrites it; if it stays missing, `tokenctl status --session \(session)` says why tokend cannot write it")
            }
            return .ok(check, "\(file.path) is absent while the session has no token")
        }
        if found.mode != file.mode {
            return .fail(
                check, "\(file.path) has mode \(String.octalMode(found.mode)), token-files says \(mode)",
                fix: "chmod \(mode) \(file.path) (tokend writes \(mode) at each refresh)")
        }
        if let group = file.group, let groupID, found.gid != groupID {
            return .fail(
                check, "\(file.path) belongs to group \(DoctorSocketCheck.groupName(found.gid)), token-files says \(group)",
                fix: "chgrp \(group) \(file.path) (tokend sets the group at each refresh)")
        }
        if hasToken == false {
            return .warn(
                check, "\(file.path) is there though the session has no token",
                fix: "rm \(file.path) (tokend removes it when the session ends; it may be left from before)")
        }
        return .ok(check, "\(file.path) mode \(mode)\(file.group.map { ", group \($0)" } ?? "")")
    }

    static func groupID(_ name: String) -> UInt32? {
        if let entry = getgrnam(name) { return entry.pointee.gr_gid }
        return UInt32(name)
    }
}
