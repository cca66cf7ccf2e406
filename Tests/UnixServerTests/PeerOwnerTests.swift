import Persons
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Persons' one way to find a loopback peer's owner (tokend-proxy's TCP listener, tokenctl's login
/// listener), over real loopback connections: the kernel names the process's user, and a socket no
/// process holds any more names no one.
@Suite struct PeerOwnerTests {
    /// A listener on 127.0.0.1 (port from the kernel), a client connected to it, and the accepted end.
    func connection() throws -> (listener: CInt, client: CInt, accepted: CInt) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { name in
                try #require(bind(listener, name, length) == 0 && listen(listener, 4) == 0)
                try #require(getsockname(listener, name, &length) == 0)
            }
        }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
        }
        try #require(connected == 0)
        let accepted = accept(listener, nil, nil)
        try #require(accepted >= 0)
        return (listener, client, accepted)
    }

    @Test func aLoopbackPeersOwnerIsTheUserOfItsProcess() throws {
        let (listener, client, accepted) = try connection()
        defer { [listener, client, accepted].forEach { close($0) } }
        #expect(PeerOwner.uid(ofLoopbackPeer: accepted) == getuid())
        let owners = try #require(PeerOwner())
        #expect(owners.uid(ofPeerOf: accepted) == getuid())
        // Asked again on the same netlink socket: each answer is matched to its question.
        #expect(owners.uid(ofPeerOf: accepted) == getuid())
        // The listener's own socket has no peer: no owner, and no error.
        #expect(owners.uid(ofPeerOf: listener) == nil)
    }

    /// A request sent and its socket closed at once: the peer's socket is orphaned (FIN_WAIT), listed with
    /// no inode and as root's; it counts as no one's, never as root's.
    @Test func aPeerWhoseProcessClosedItsSocketIsNoOnes() throws {
        let (listener, client, accepted) = try connection()
        defer { [listener, accepted].forEach { close($0) } }
        close(client)
        #expect(PeerOwner.uid(ofLoopbackPeer: accepted) == nil)
    }

    @Test func aSocketThatIsNotTCPHasNoLoopbackOwner() throws {
        var fds: [CInt] = [0, 0]
        let made = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds)
        try #require(made == 0)
        defer { fds.forEach { close($0) } }
        #expect(PeerOwner.uid(ofLoopbackPeer: fds[0]) == nil)
        #expect(SocketPeer.of(unixSocket: fds[0], groups: false)?.uid == getuid())
    }
}
