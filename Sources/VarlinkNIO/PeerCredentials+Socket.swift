import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// struct ucred, spelled out: glibc hides its declaration behind _GNU_SOURCE.
struct UCred {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

extension PeerCredentials {
    /// SO_PEERCRED of a connected Unix socket; nil if unavailable.
    static func of(socket fd: CInt) -> PeerCredentials? {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid)
    }
}
