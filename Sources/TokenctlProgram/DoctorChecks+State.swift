#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Owner and mode of a path, as stat(2) found them.
struct FileFacts: Equatable, Sendable {
    var path: String
    var uid: UInt32
    var gid: UInt32
    /// Permission bits with setuid, setgid and sticky.
    var mode: UInt32

    static func of(_ path: String) -> FileFacts? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileFacts(path: path, uid: info.st_uid, gid: info.st_gid, mode: UInt32(info.st_mode) & 0o7777)
    }

    var isSticky: Bool { mode & UInt32(S_ISVTX) != 0 }
}

/// The state directory as tokend requires it (StateStore's StateDirectory and
/// Ownership, the rules of OpenSSH's StrictModes): every directory above it
/// owned by root or tokend's user and not writable by others unless sticky;
/// the directory and each session file tokend's own, writable by no one else.
enum DoctorStateCheck {
    static let name = "state directory"

    /// The directories above `directory`'s real path, "/" first.
    static func parents(of realPath: String) -> [String] {
        var parents = ["/"]
        var current = ""
        for component in realPath.split(separator: "/").dropLast() {
            current += "/\(component)"
            parents.append(current)
        }
        return parents
    }

    static func judgeParent(_ parent: FileFacts, daemon: DaemonIdentity) -> DoctorResult? {
        if parent.uid != 0 && parent.uid != daemon.uid {
            return .fail(
                name,
                "\(parent.path) above it belongs to \(DoctorSocketCheck.userName(parent.uid)), neither root nor tokend's user: its owner can swap the state directory",
                fix: "chown root: \(parent.path), or use a state directory under directories root owns")
        }
        if parent.mode & 0o022 != 0 && !parent.isSticky {
            return .fail(
                name,
                "\(parent.path) above it has mode \(String.octalMode(parent.mode)): others can rename the state directory away",
                fix: "chmod go-w \(parent.path)")
        }
        return nil
    }

    /// The directory itself (tokend tightens it to 0700 at start).
    static func judgeDirectory(_ directory: FileFacts, daemon: DaemonIdentity) -> DoctorResult {
        let user = DoctorSocketCheck.userName(daemon.uid)
        if directory.uid != daemon.uid {
            return .fail(
                name,
                "\(directory.path) belongs to \(DoctorSocketCheck.userName(directory.uid)), tokend runs as \(user) (\(daemon.source)): tokend refuses it",
                fix: "chown -R \(user): \(directory.path) after checking its contents")
        }
        if directory.mode & 0o022 != 0 {
            return .fail(
                name, "\(directory.path) has mode \(String.octalMode(directory.mode)): others may write it, and tokend refuses it",
                fix: "chmod 0700 \(directory.path)")
        }
        if directory.mode & 0o077 != 0 {
            return .warn(
                name, "\(directory.path) has mode \(String.octalMode(directory.mode)): others may list it",
                fix: "chmod 0700 \(directory.path)")
        }
        return .ok(name, "\(directory.path) belongs to \(user), mode \(String.octalMode(directory.mode))")
    }

    /// A session file (NAME.session): tokend's, 0600.
    static func judgeFile(_ file: FileFacts, daemon: DaemonIdentity) -> DoctorResult? {
        let user = DoctorSocketCheck.userName(daemon.uid)
        if file.uid != daemon.uid {
            return .fail(
                "state file", "\(file.path) belongs to \(DoctorSocketCheck.userName(file.uid)), not \(user): tokend refuses it",
                fix: "chown \(user): \(file.path) after checking it")
        }
        if file.mode & 0o077 != 0 {
            return .fail(
                "state file", "\(file.path) has mode \(String.octalMode(file.mode)), tokend writes 0600",
                fix: "chmod 0600 \(file.path)")
        }
        return nil
    }

    static func run(directory: String, daemon: DaemonIdentity?) -> [DoctorResult] {
        guard let daemon else {
            return [.skip(name, "tokend's user is unknown (tokend not reachable, no user tokend)")]
        }
        guard let real = realpath(directory, nil) else {
            return [
                .fail(
                    name, "\(directory) cannot be examined (\(String(cString: strerror(errno))))",
                    fix: "mkdir -m 0700 \(directory) && chown \(DoctorSocketCheck.userName(daemon.uid)): \(directory), or correct daemon.state-directory")
            ]
        }
        let realPath = String(cString: real)
        free(real)
        for parent in parents(of: realPath) {
            if let facts = FileFacts.of(parent), let problem = judgeParent(facts, daemon: daemon) { return [problem] }
        }
        guard let facts = FileFacts.of(realPath) else {
            return [.fail(name, "\(realPath) cannot be examined", fix: "check daemon.state-directory")]
        }
        var results = [judgeDirectory(facts, daemon: daemon)]
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: realPath) else {
            results.append(
                .skip("state files", "\(realPath) cannot be listed by this user: run tokenctl doctor as root or tokend's user"))
            return results
        }
        for name in names.sorted() where name.hasSuffix(".session") {
            if let file = FileFacts.of("\(realPath)/\(name)"), let problem = judgeFile(file, daemon: daemon) {
                results.append(problem)
            }
        }
        for name in names.sorted() where name.includes(".session.corrupt-") {
            results.append(
                .warn(
                    "state file", "\(realPath)/\(name) is a corrupt state file tokend moved aside",
                    fix: "read it, then remove it; its session needs a login (tokenctl login)"))
        }
        return results
    }
}
