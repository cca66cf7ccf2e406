#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// A path that holds tokens or the files holding them, owned by someone else
/// or writable by a group or other users: whoever can write it can replace a
/// session's state (OpenSSH's StrictModes refuses the same).
public struct UnsafeOwnershipError: Error, Sendable, CustomStringConvertible {
    public let path: String
    public let problem: String
    public let fix: String
    public var description: String { "\(path) \(problem); fix: \(fix)" }
}

enum Ownership {
    /// Throws unless `path` (when it exists) belongs to tokend's effective
    /// user and no group or other user may write it. `fixMode` is the mode
    /// the error suggests ("0700" for a directory, "0600" for a file).
    static func check(_ path: String, fixMode: String) throws(UnsafeOwnershipError) {
        var info = stat()
        guard stat(path, &info) == 0 else { return }
        try check(info, path: path, fixMode: fixMode)
    }

    /// The same check, of what fstat or stat found at `path`.
    static func check(_ info: stat, path: String, fixMode: String) throws(UnsafeOwnershipError) {
        let me = geteuid()
        if info.st_uid != me {
            throw UnsafeOwnershipError(
                path: path, problem: "is owned by uid \(info.st_uid), not by tokend's user (uid \(me))",
                fix: "chown \(userName(me)): \(path) after checking its contents, or use a directory of tokend's own")
        }
        if info.st_mode & 0o022 != 0 {
            throw UnsafeOwnershipError(
                path: path, problem: "is writable by its group or by other users (mode 0\(String(info.st_mode & 0o7777, radix: 8)))",
                fix: "chmod \(fixMode) \(path)")
        }
    }

    /// The user's name for the fix, read once at start (NSS never runs on the loop).
    static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return String(uid) }
        return String(cString: name)
    }
}
