import Persons
import Testing
import Varlink

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// The one reading of a Unix socket's peer (SO_PEERCRED, SO_PEERGROUPS).
@Suite struct SocketPeerTests {
    func pair() throws -> (CInt, CInt) {
        var fds: [CInt] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    @Test func thePeerOfAUnixSocketIsThisProcess() throws {
        let (a, b) = try pair()
        defer { close(a); close(b) }
        let peer = try #require(SocketPeer.of(unixSocket: a))
        #expect(peer.pid == getpid() && peer.uid == getuid() && peer.gid == getgid())
        var own = [gid_t](repeating: 0, count: Int(getgroups(0, nil)))
        let count = getgroups(Int32(own.count), &own)
        #expect(Set(peer.groups) == Set(own.prefix(Int(max(count, 0)))))
        #expect(SocketPeer.of(unixSocket: a, groups: false)?.groups == [])
        // What the server takes at accept is the same reading.
        #expect(PeerCredentials.of(socket: b) == PeerCredentials(pid: peer.pid, uid: peer.uid, gid: peer.gid, groups: peer.groups))
    }

    @Test func noUnixPeerIsNoPeer() throws {
        let unconnected = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(unconnected) }
        let pipeEnds = UnsafeMutablePointer<CInt>.allocate(capacity: 2)
        defer { pipeEnds.deallocate() }
        try #require(pipe(pipeEnds) == 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        #expect(SocketPeer.of(unixSocket: pipeEnds[0]) == nil)
        #expect(SocketPeer.of(unixSocket: -1) == nil)
        // An unconnected Unix socket: the kernel answers with no process (pid 0), as for any such socket.
        #expect(SocketPeer.of(unixSocket: unconnected)?.pid ?? 0 == 0)
    }
}
