import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// The socket file of a share, made by tokenctl with the asker's rights:
/// never over an existing path, never through a symbolic link at the path,
/// with its mode from the start (umask around bind), listening before it is
/// handed to tokend. Removed on any failure: only the file this process
/// made (same device and inode), never one put there since.
struct ShareFile {
    struct Failure: Error {
        let reason: String
    }

    let fd: CInt
    let path: String
    let device: UInt64
    let inode: UInt64

    /// `path` against the current directory when relative (tokend sees absolute paths only).
    static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/") else { return path }
        let directory = FileManager.default.currentDirectoryPath
        return (directory.hasSuffix("/") ? directory : directory + "/") + path
    }

    static func mode(_ text: String) throws -> mode_t {
        guard let value = UInt32(text, radix: 8), value <= 0o777, value & 0o600 == 0o600 else {
            throw ValidationError("--mode \(text): an octal mode up to 0777 that lets you read and write (e.g. 0600, 0660)")
        }
        return mode_t(value)
    }

    static func bind(_ path: String, mode: mode_t) throws(Failure) -> ShareFile {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            throw Failure(reason: "the path is \(path.utf8.count) bytes; a socket address holds at most \(capacity - 1)")
        }
        var existing = stat()
        if lstat(path, &existing) == 0 {
            throw Failure(
                reason: existing.st_mode & S_IFMT == S_IFLNK
                    ? "it is a symbolic link, which a share does not follow" : "something is there already, which a share does not replace")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(reason: String(cString: strerror(errno))) }
        // bind(2) makes the file and fails on anything already there (a symbolic link included):
        // nothing is replaced or followed. The umask gives it its mode from the start.
        let saved = umask(~mode & 0o777)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let bindError = errno
        umask(saved)
        guard bound == 0 else {
            close(fd)
            throw Failure(reason: bindError == EADDRINUSE ? "something is there already, which a share does not replace"
                : String(cString: strerror(bindError)))
        }
        var made = stat()
        guard lstat(path, &made) == 0, made.st_mode & S_IFMT == S_IFSOCK else {
            close(fd)
            throw Failure(reason: "the socket file vanished as it was made")
        }
        let file = ShareFile(fd: fd, path: path, device: UInt64(made.st_dev), inode: UInt64(made.st_ino))
        guard made.st_mode & 0o777 == mode else {
            file.remove()
            throw Failure(reason: "the socket file was not made with mode \(String(mode, radix: 8))")
        }
        guard listen(fd, 128) == 0 else {
            let reason = String(cString: strerror(errno))
            file.remove()
            throw Failure(reason: reason)
        }
        return file
    }

    /// Closes this process's descriptor and removes the file it made.
    func remove() {
        var now = stat()
        if lstat(path, &now) == 0, UInt64(now.st_dev) == device, UInt64(now.st_ino) == inode { unlink(path) }
        close(fd)
    }

    /// tokend serves the socket now: this process's copy is closed, the file stays.
    func release() { close(fd) }

    /// After a revocation: the socket file at `path`, if it is one and this user's.
    static func removeSocket(at path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK, info.st_uid == getuid() else { return }
        unlink(path)
    }
}
