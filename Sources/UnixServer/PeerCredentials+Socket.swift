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
    /// SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket, taken once
    /// at accept: the kernel's own record of the peer's groups, so deciding
    /// access never asks the user and group databases (NSS) on the loop.
    /// nil if unavailable.
    static func of(socket fd: CInt) -> PeerCredentials? {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return PeerCredentials(
            pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: supplementaryGroups(of: fd))
    }

    /// The peer's supplementary groups (SO_PEERGROUPS, Linux 4.13); empty if unavailable.
    static func supplementaryGroups(of fd: CInt) -> [UInt32] {
        let peerGroups: Int32 = 59  // SO_PEERGROUPS
        var groups = [gid_t](repeating: 0, count: 32)
        var length = socklen_t(groups.count * MemoryLayout<gid_t>.size)
        if getsockopt(fd, SOL_SOCKET, peerGroups, &groups, &length) != 0 {
            guard errno == ERANGE else { return [] }
            groups = [gid_t](repeating: 0, count: Int(length) / MemoryLayout<gid_t>.size)
            guard getsockopt(fd, SOL_SOCKET, peerGroups, &groups, &length) == 0 else { return [] }
        }
        return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size))
    }
}
