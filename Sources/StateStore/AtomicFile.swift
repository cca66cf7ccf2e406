#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// Replaces a file's contents so that, whatever happens, the path holds
/// either the old contents or the new ones, and the new ones are on disk when
/// `write` returns: temp file, fsync, rename, fsync of the directory.
public enum AtomicFile {
    /// The steps of a write, in order; tests stop a write after any of them.
    public enum Step: String, Sendable, CaseIterable {
        case createdTemporary, wroteTemporary, syncedTemporary, renamed, syncedDirectory
    }

    public struct WriteError: Error, CustomStringConvertible {
        public let step: String
        public let path: String
        public let errno: Int32
        public var description: String { "\(step) \(path): \(String(cString: strerror(errno)))" }
    }

    /// Writes `data` to `path` with `mode` (0600 unless said) and, when given,
    /// group `group`. `afterStep` lets tests simulate a crash by throwing.
    /// Returns the time spent in fsync (the file's and the directory's): what
    /// durability costs, for the metrics.
    @discardableResult
    public static func write(
        _ data: [UInt8], to path: String, mode: UInt32 = 0o600, group: UInt32? = nil,
        afterStep: (Step) throws -> Void = { _ in }
    ) throws -> Duration {
        let clock = ContinuousClock()
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw WriteError(step: "open", path: temporary, errno: errno) }
        var closed = false
        defer { if !closed { close(fd) } }
        try afterStep(.createdTemporary)
        var written = 0
        while written < data.count {
            let result = data.withUnsafeBytes { buffer in
                Glibc.write(fd, buffer.baseAddress! + written, data.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw WriteError(step: "write", path: temporary, errno: errno)
            }
            written += result
        }
        if let group, fchown(fd, uid_t.max, group) != 0 {
            throw WriteError(step: "chown", path: temporary, errno: errno)
        }
        if mode != 0o600, fchmod(fd, mode_t(mode)) != 0 {
            throw WriteError(step: "chmod", path: temporary, errno: errno)
        }
        try afterStep(.wroteTemporary)
        let syncStarted = clock.now
        guard fsync(fd) == 0 else { throw WriteError(step: "fsync", path: temporary, errno: errno) }
        var syncing = clock.now - syncStarted
        try afterStep(.syncedTemporary)
        closed = true
        guard close(fd) == 0 else { throw WriteError(step: "close", path: temporary, errno: errno) }
        guard rename(temporary, path) == 0 else { throw WriteError(step: "rename", path: path, errno: errno) }
        try afterStep(.renamed)
        let directoryStarted = clock.now
        try syncDirectory(of: path)
        syncing += clock.now - directoryStarted
        try afterStep(.syncedDirectory)
        return syncing
    }

    static func syncDirectory(of path: String) throws {
        let directory = Self.directory(of: path)
        let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw WriteError(step: "open", path: directory, errno: errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw WriteError(step: "fsync", path: directory, errno: errno) }
    }

    /// The directory a path names a file in: trailing slashes and the last
    /// component go; "" for a name without a directory, "/" for one in the root.
    static func directory(of path: String) -> String {
        var bytes = Array(path.utf8)
        func dropTrailingSlashes() { while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() } }
        dropTrailingSlashes()
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "" }
        bytes.removeSubrange(slash == 0 ? 1... : slash...)
        dropTrailingSlashes()
        return String(decoding: bytes, as: UTF8.self)
    }
}
