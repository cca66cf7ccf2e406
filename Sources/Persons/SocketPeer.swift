#if canImport(Glibc)
import Glibc
#endif

/// The process at the other end of a connected Unix socket, as the kernel
/// recorded it when that process connected (SO_PEERCRED, SO_PEERGROUPS): the
/// one reading of a Unix peer for tokend's socket, its side listeners and
/// tokend-proxy's Unix listener. A loopback TCP peer's owner is `PeerOwner`'s.
public struct SocketPeer: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    /// Supplementary groups of the peer process when it connected; empty if
    /// the kernel does not say (before Linux 4.13) or they were not asked for.
    public var groups: [UInt32]

    /// The peer of `fd`, with its supplementary groups when `groups` (the
    /// kernel's own record, so deciding access never asks the user and group
    /// databases); nil when `fd` is no connected Unix socket.
    public static func of(unixSocket fd: CInt, groups: Bool = true) -> SocketPeer? {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return SocketPeer(
            pid: credentials.pid, uid: credentials.uid, gid: credentials.gid,
            groups: groups ? supplementaryGroups(of: fd) : [])
    }

    /// struct ucred, spelled out: glibc hides its declaration behind _GNU_SOURCE.
    private struct UCred {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// SO_PEERGROUPS (Linux 4.13), grown to the size the kernel asks for; empty if unavailable.
    private static func supplementaryGroups(of fd: CInt) -> [UInt32] {
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
