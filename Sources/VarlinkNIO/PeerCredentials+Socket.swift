import NIOCore
import NIOPosix
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
    /// SO_PEERCRED of a connected Unix socket channel; nil if unavailable.
    static func of(_ channel: Channel) -> EventLoopFuture<PeerCredentials?> {
        guard let provider = channel as? SocketOptionProvider else {
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let future: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: .socket, name: NIOBSDSocket.Option(rawValue: SO_PEERCRED))
        return future.map { PeerCredentials(pid: $0.pid, uid: $0.uid, gid: $0.gid) }
            .recover { _ in nil }
    }
}
