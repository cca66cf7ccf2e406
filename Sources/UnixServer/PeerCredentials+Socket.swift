import Persons
import Varlink

extension PeerCredentials {
    /// The peer of a connected Unix socket (SO_PEERCRED and SO_PEERGROUPS,
    /// read by `SocketPeer`), taken once at accept; nil if unavailable.
    static func of(socket fd: CInt) -> PeerCredentials? {
        guard let peer = SocketPeer.of(unixSocket: fd) else { return nil }
        return PeerCredentials(pid: peer.pid, uid: peer.uid, gid: peer.gid, groups: peer.groups)
    }
}
