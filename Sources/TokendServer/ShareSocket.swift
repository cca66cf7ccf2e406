import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// What a descriptor handed in with CreateShare must be: a listening Unix
/// stream socket bound at the path the call names. Anything else (a
/// connected socket, a TCP listener, a socket bound elsewhere, a file) is
/// refused with the reason.
enum ShareSocket {
    static func check(_ fd: CInt, path: String) throws(VarlinkError) {
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(fd, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        guard let domain = option(SO_DOMAIN) else { throw refused(path, "the descriptor passed is not a socket") }
        guard domain == AF_UNIX else { throw refused(path, "the socket passed is not a Unix socket") }
        guard option(SO_TYPE) == Int32(SOCK_STREAM.rawValue) else {
            throw refused(path, "the socket passed is not a stream socket")
        }
        guard option(SO_ACCEPTCONN) == 1 else { throw refused(path, "the socket passed is not listening") }
        guard let bound = boundPath(fd) else { throw refused(path, "the socket passed is not bound to a path") }
        guard bound == path else { throw refused(path, "the socket passed is bound at \(bound), not at \(path)") }
    }

    /// The path a Unix socket is bound to (getsockname); nil for an unnamed or abstract one.
    static func boundPath(_ fd: CInt) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let header = MemoryLayout<sa_family_t>.size
        guard named == 0, address.sun_family == sa_family_t(AF_UNIX), Int(length) > header + 1 else { return nil }
        return withUnsafeBytes(of: address.sun_path) { raw in
            let bytes = raw.prefix(Int(length) - header)
            guard let first = bytes.first, first != 0 else { return nil }  // abstract
            return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    /// The socket file's mode, where tokend can see it; else the mode the
    /// caller says it made (a hardened unit does not see users' directories).
    static func mode(at path: String, made: Int? = nil) -> Int {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK else { return (made ?? 0) & 0o777 }
        return Int(info.st_mode & 0o7777)
    }

    static func refused(_ path: String, _ reason: String) -> VarlinkError {
        VarlinkError(BrokerInterface.Error.shareRefused, ["path": .string(path), "reason": .string(reason)])
    }
}
