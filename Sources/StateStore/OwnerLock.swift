#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

#if canImport(Glibc)
import Glibc
#endif

/// One tokend per state directory: an exclusive lock on `tokend.lock` there,
/// held for the process's life. The kernel drops it when the process ends,
/// however it ends (kill -9 included), so it is never stale. Two processes
/// holding one refresh token would each rotate it, and the provider would
/// revoke the whole family for everyone.
public final class OwnerLock: Sendable {
    public let path: String
    private let fd: CInt

    private init(path: String, fd: CInt) {
        self.path = path
        self.fd = fd
    }

    deinit { close(fd) }

    /// Takes the lock, or throws naming the process that holds it.
    public static func acquire(directory: String) throws(OwnerLockError) -> OwnerLock {
        let path = "\(directory)/tokend.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw OwnerLockError(directory: directory, holder: nil, problem: String(cString: strerror(errno))) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let problem = errno == EWOULDBLOCK ? nil : String(cString: strerror(errno))
            let holder = holderPID(fd)
            close(fd)
            throw OwnerLockError(directory: directory, holder: holder, problem: problem)
        }
        let line = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = line.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return OwnerLock(path: path, fd: fd)
    }

    /// The pid the holder wrote when it took the lock.
    static func holderPID(_ fd: CInt) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[..<count], as: UTF8.self).trimming(.whitespacesAndNewlines))
    }
}

public struct OwnerLockError: Error, CustomStringConvertible {
    public let directory: String
    /// The running tokend's pid, when the lock is held.
    public let holder: Int32?
    /// Why the lock file could not be used, when it is not held.
    public let problem: String?

    public var description: String {
        if let problem { return "cannot lock the state directory \(directory) (tokend.lock: \(problem))" }
        let who = holder.map { "pid \($0)" } ?? "another process"
        return "another tokend (\(who)) already owns the state directory \(directory); it keeps its socket and "
            + "session. Stop it first (systemctl stop tokend); if it hangs, "
            + (holder.map { "kill -9 \($0)" } ?? "kill it") + " releases the lock."
    }
}
