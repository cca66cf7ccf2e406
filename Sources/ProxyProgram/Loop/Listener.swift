import NIOCore  // SocketAddress, for what the listener is bound to
import Persons

#if canImport(Glibc)
import Glibc
#endif

/// The listening socket: bound from --listen, or passed by systemd.
struct Listener: Sendable {
    let fd: CInt
    /// Its address, from the socket itself (a passed one may be either kind, a port may be 0); nil on a path.
    let local: SocketAddress?
    /// The socket file this proxy bound (device and inode), so that its stop removes that file only, never
    /// one another process bound at the path since.
    var file: (device: UInt64, inode: UInt64)? = nil

    static func open(_ address: ListenAddress) throws -> Listener {
        let fd: CInt
        switch address {
        case .unix(let path, let mode):
            fd = try bound(family: AF_UNIX) { fd in
                var name = sockaddr_un()
                name.sun_family = sa_family_t(AF_UNIX)
                let bytes = Array(path.utf8)
                guard bytes.count < MemoryLayout.size(ofValue: name.sun_path) else { errno = ENAMETOOLONG; return -1 }
                withUnsafeMutableBytes(of: &name.sun_path) { $0.copyBytes(from: bytes) }
                // A socket left by an earlier run is replaced; one a live process serves is not (EADDRINUSE),
                // nor is any other file.
                var status = stat()
                if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK {
                    guard !Self.answers(name) else { errno = EADDRINUSE; return -1 }
                    unlink(path)
                }
                let result = withUnsafePointer(to: &name) {
                    bind(fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_un>.size))
                }
                if result == 0 { chmod(path, mode) }
                return result
            }
        case .tcp(let host, let port):
            guard let resolved = Dialer.resolve(host, port: port, numeric: true)?.first else { throw SocketError("getaddrinfo", EINVAL) }
            fd = try bound(family: resolved.family) { fd in
                var one: CInt = 1
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size))
                return withUnsafeBytes(of: resolved.storage) { bind(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), resolved.length) }
            }
        case .inherited(let passed):
            _ = fcntl(passed, F_SETFL, fcntl(passed, F_GETFL) | O_NONBLOCK)
            _ = fcntl(passed, F_SETFD, FD_CLOEXEC)
            fd = passed
        }
        var listener = Listener(fd: fd, local: localAddress(of: fd))
        if case .unix(let path, _) = address { listener.file = identity(of: path) }
        return listener
    }

    /// Whether a process accepts connections at the Unix socket `name`.
    private static func answers(_ name: sockaddr_un) -> Bool {
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { Glibc.close(probe) }
        var name = name
        return withUnsafePointer(to: &name) {
            connect(probe, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_un>.size))
        } == 0
    }

    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return (UInt64(status.st_dev), UInt64(status.st_ino))
    }

    /// Whether the file at `path` is still the socket this proxy bound.
    func isStillBound(at path: String) -> Bool {
        guard let file, let now = Self.identity(of: path) else { return false }
        return now == file
    }

    /// A socket of `family`, bound by `bind` and listening.
    private static func bound(family: CInt, _ bind: (CInt) -> CInt) throws -> CInt {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError("socket", errno) }
        guard bind(fd) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SocketError("bind", code)
        }
        guard listen(fd, 1024) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SocketError("listen", code)
        }
        return fd
    }

    private static func localAddress(of fd: CInt) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length)
        }
        guard named == 0 else { return nil }
        let family = CInt(storage.ss_family)
        guard family == AF_INET || family == AF_INET6 else { return nil }
        return Dialer.Address(storage: storage, length: length, family: family).socketAddress
    }

    /// The connecting process's uid (SO_PEERCRED) is this process's: one proxy serves one user, whom
    /// tokend's policy admits or refuses.
    static func peerIsThisUser(_ fd: CInt) -> Bool {
        peerUID(fd) == getuid()
    }

    /// The connecting process's uid (SO_PEERCRED) on a Unix socket; nil when the kernel does not say.
    static func peerUID(_ fd: CInt) -> UInt32? {
        SocketPeer.of(unixSocket: fd, groups: false)?.uid
    }
}
