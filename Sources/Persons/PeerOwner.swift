#if canImport(Glibc)
import Glibc
#endif

/// Who owns the other end of a loopback TCP connection: the kernel's
/// socket diagnostics (NETLINK_SOCK_DIAG, what `ss` asks), one exact look-up
/// of the peer's socket by its four addresses, not a scan of /proc/net/tcp.
/// The one way tokend's programs find a loopback peer's owner: tokend-proxy's
/// TCP listener (one netlink socket per loop, used from that loop's thread
/// only), tokenctl's login listener (`uid(ofLoopbackPeer:)`, one look-up).
/// The peer of a Unix socket is read with `SocketPeer.of(unixSocket:)`.
public final class PeerOwner {
    private let netlink: CInt
    private var sequence: UInt32 = 0

    // linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h
    private static let netlinkSockDiag: CInt = 4
    private static let sockDiagByFamily: UInt16 = 20
    private static let netlinkError: UInt16 = 2
    private static let requestFlag: UInt16 = 1
    /// nlmsghdr (16) + inet_diag_req_v2 (56).
    private static let requestSize = 72
    /// Where inet_diag_msg's idiag_uid is in a reply: nlmsghdr (16) + family, state, timer, retrans (4) +
    /// inet_diag_sockid (48) + expires, rqueue, wqueue (12).
    private static let uidOffset = 80
    /// idiag_inode, after idiag_uid.
    private static let inodeOffset = 84

    public init?() {
        netlink = socket(AF_NETLINK, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), Self.netlinkSockDiag)
        guard netlink >= 0 else { return nil }
        // A reply that does not come within a second is no reply: the connection counts as no one's.
        var wait = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(netlink, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(netlink) }

    /// The uid owning the other end of `fd`, with a netlink socket of its own: for a program that asks
    /// once in a while (a listener that serves one request), not for a loop that asks per connection.
    public static func uid(ofLoopbackPeer fd: CInt) -> UInt32? {
        PeerOwner()?.uid(ofPeerOf: fd)
    }

    /// The uid owning the socket at the other end of `fd`, an accepted loopback TCP connection; nil when
    /// the kernel does not say (the peer is gone already, or is not on this host). Only a socket a process
    /// still holds counts: one its owner closed (orphaned in FIN_WAIT, or TIME_WAIT) has no inode and is
    /// listed as root's, so a request another user sends and closes at once would otherwise pass as root's.
    public func uid(ofPeerOf fd: CInt) -> UInt32? {
        guard let local = Self.address(fd, getsockname), let peer = Self.address(fd, getpeername), local.family == peer.family else {
            return nil
        }
        sequence &+= 1
        var request = [UInt8](repeating: 0, count: Self.requestSize)
        Self.put32(&request, 0, UInt32(Self.requestSize))
        Self.put16(&request, 4, Self.sockDiagByFamily)
        Self.put16(&request, 6, Self.requestFlag)
        Self.put32(&request, 8, sequence)
        // inet_diag_req_v2: the peer's socket, seen from its side: its port and address are the source.
        request[16] = UInt8(local.family)
        request[17] = UInt8(IPPROTO_TCP)
        Self.put32(&request, 20, 0xFFFF_FFFF)  // any state
        request.replaceSubrange(24..<26, with: peer.port)
        request.replaceSubrange(26..<28, with: local.port)
        request.replaceSubrange(28..<28 + peer.address.count, with: peer.address)
        request.replaceSubrange(44..<44 + local.address.count, with: local.address)
        Self.put32(&request, 64, 0xFFFF_FFFF)  // INET_DIAG_NOCOOKIE
        Self.put32(&request, 68, 0xFFFF_FFFF)
        guard send(netlink, request, request.count, 0) == request.count else { return nil }
        var reply = [UInt8](repeating: 0, count: 512)
        while true {
            let count = recv(netlink, &reply, reply.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count >= 16 else { return nil }
            let type = reply.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4, as: UInt16.self) }
            let replySequence = Self.get32(reply, 8)
            if replySequence != sequence { continue }  // an answer to an earlier question that timed out
            guard type == Self.sockDiagByFamily, count >= Self.inodeOffset + 4 else { return nil }  // NLMSG_ERROR: no such socket
            guard Self.get32(reply, Self.inodeOffset) != 0 else { return nil }  // no process holds it
            return Self.get32(reply, Self.uidOffset)
        }
    }

    /// A socket's address as inet_diag_sockid holds it: the port's and the address's bytes, network order.
    private static func address(
        _ fd: CInt, _ name: (CInt, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> CInt
    ) -> (family: CInt, port: [UInt8], address: [UInt8])? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        guard withUnsafeMutablePointer(to: &storage, { name(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length) }) == 0
        else { return nil }
        return withUnsafeBytes(of: storage) { raw in
            switch CInt(storage.ss_family) {
            case AF_INET: (AF_INET, Array(raw[2..<4]), Array(raw[4..<8]))  // sockaddr_in: port, then address
            case AF_INET6: (AF_INET6, Array(raw[2..<4]), Array(raw[8..<24]))  // sockaddr_in6: port, flow info, address
            default: nil
            }
        }
    }

    // Netlink's own fields are in the host's byte order.
    private static func put32(_ bytes: inout [UInt8], _ at: Int, _ value: UInt32) {
        withUnsafeBytes(of: value) { bytes.replaceSubrange(at..<at + 4, with: $0) }
    }

    private static func put16(_ bytes: inout [UInt8], _ at: Int, _ value: UInt16) {
        withUnsafeBytes(of: value) { bytes.replaceSubrange(at..<at + 2, with: $0) }
    }

    private static func get32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) }
    }
}
