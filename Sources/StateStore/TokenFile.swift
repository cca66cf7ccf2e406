#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// A file holding the session's current access token (never the refresh
/// token) for long-running programs: the WLCG BEARER_TOKEN_FILE convention,
/// like Vault Agent's file sink. Replaced atomically (AtomicFile) so a reader
/// sees the old token or the new one, never half of one.
public struct TokenFile: Sendable, Equatable {
    public let path: String
    /// Group that may read it (nil: tokend's own).
    public let group: UInt32?
    public let mode: UInt32

    public init(path: String, group: UInt32?, mode: UInt32) {
        self.path = path
        self.group = group
        self.mode = mode
    }

    /// Refuses a mode that lets a group or other users write: a reader that
    /// could write the file could hand every other reader a token of its own.
    public func write(_ token: String) throws {
        if mode & 0o022 != 0 {
            throw UnsafeOwnershipError(
                path: path, problem: "would be writable by its group or by other users (mode 0\(String(mode, radix: 8)))",
                fix: "give token-files a mode without write for group or others, such as \"0640\"")
        }
        try makeDirectories()
        try AtomicFile.write(Array((token + "\n").utf8), to: path, mode: mode, group: group)
    }

    /// Directories missing on the way to the file: 0750 and the file's group
    /// (so that group can reach the file), 0700 for a file of tokend's own.
    func makeDirectories() throws {
        var missing: [String] = []
        var directory = AtomicFile.directory(of: path)
        while !directory.isEmpty, directory != "/", !FileManager.default.fileExists(atPath: directory) {
            missing.append(directory)
            directory = AtomicFile.directory(of: directory)
        }
        let mode: mode_t = group == nil ? 0o700 : 0o750
        for directory in missing.reversed() {
            guard mkdir(directory, mode) == 0 || errno == EEXIST else {
                throw AtomicFile.WriteError(step: "mkdir", path: directory, errno: errno)
            }
            if let group { _ = chown(directory, uid_t.max, group) }
            _ = chmod(directory, mode)  // not narrowed by the umask
        }
    }

    /// The token is no longer valid (logout, login required): the file goes.
    public func remove() {
        unlink(path)
    }
}
