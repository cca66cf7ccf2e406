import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A file holding the session's current access token (never the refresh
/// token) for long-running programs: the WLCG BEARER_TOKEN_FILE convention,
/// like Vault Agent's file sink. Replaced atomically (temporary file, rename)
/// so a reader sees the old token or the new one, never half of one.
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

    public func write(_ token: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let temporary = "\(directory)/.\((path as NSString).lastPathComponent).\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw AtomicFile.WriteError(step: "open", path: temporary, errno: errno) }
        defer { close(fd) }
        let bytes = Array((token + "\n").utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw AtomicFile.WriteError(step: "write", path: temporary, errno: errno) }
        if let group, fchown(fd, uid_t.max, group) != 0 {
            throw AtomicFile.WriteError(step: "chown", path: temporary, errno: errno)
        }
        guard fchmod(fd, mode_t(mode)) == 0 else { throw AtomicFile.WriteError(step: "chmod", path: temporary, errno: errno) }
        guard rename(temporary, path) == 0 else { throw AtomicFile.WriteError(step: "rename", path: path, errno: errno) }
    }

    /// The token is no longer valid (logout, login required): the file goes.
    public func remove() {
        unlink(path)
    }
}
