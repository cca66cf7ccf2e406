import Foundation
import Logging
import Loopback
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The listener (SwiftNIO HTTP/1) and, on each event loop, the client
/// connections it accepts and the upstream connections that serve them;
/// tokend's answers come from `Credentials`.
final class Proxy: Sendable {
    let upstream: Upstream
    let credentials: Credentials
    let bufferLimit: Int
    let bodyBudget: BodyBudget
    let bodyTimeout: Duration
    let headerTimeout: Duration
    let maxConnections: Int
    let timeout: Duration
    let logger: Logger
    /// Connections being served: at most `maxConnections`, so that memory is bounded in total.
    let admission: Admission

    init(
        upstream: Upstream, session: String?, resource: String? = nil, scope: String? = nil, tokendSocket: String?, bufferLimit: Int, bodyBudget: Int,
        bodyTimeout: Duration, headerTimeout: Duration, maxConnections: Int, timeout: Duration, logger: Logger
    ) {
        self.upstream = upstream
        credentials = Credentials(session: session, resource: resource, scope: scope, socket: tokendSocket, logger: logger)
        self.bufferLimit = bufferLimit
        self.bodyBudget = BodyBudget(limit: bodyBudget)
        self.bodyTimeout = bodyTimeout
        self.headerTimeout = headerTimeout
        self.maxConnections = maxConnections
        admission = Admission(limit: maxConnections)
        self.timeout = timeout
        self.logger = logger
    }

    /// Serves until the listener closes; tokend's events are followed meanwhile.
    func run(on address: ListenAddress) async throws {
        let following = Task { await credentials.follow() }
        defer { following.cancel() }
        try await listen(on: address)
    }

    private func listen(on address: ListenAddress) async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        // A redirect would carry the token elsewhere: the client gets it as it is (the proxy follows none).
        let tls = try upstream.tls ? NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        let pools = try await UpstreamPool.pools(for: group, upstream: upstream, tls: tls, keep: maxConnections)
        let settingsBox = Mutex<Settings?>(nil)
        let initializer: @Sendable (Channel) -> EventLoopFuture<Void> = { channel in
            guard let settings = settingsBox.withLock({ $0 }), let pool = pools[ObjectIdentifier(channel.eventLoop)] else {
                return channel.close()
            }
            let admitted = self.admission.admitted(channel)
            let peer: EventLoopFuture<Bool> =
                settings.pages.hosts == nil ? Self.peerIsThisUser(channel) : channel.eventLoop.makeSucceededFuture(true)
            return peer.flatMapThrowing { allowed in
                try channel.pipeline.syncOperations.addHandler(
                    ClientHandler(settings: settings, pool: pool.value, allowed: allowed, admitted: admitted))
            }
        }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // Nothing is accepted until the settings, which need the bound address, are made.
            .serverChannelOption(.autoRead, value: false)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(AdmissionHandler(self.admission)) }
            }
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer(initializer)
        let server: Channel
        switch address {
        case .unix(let path, let mode):
            server = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
            chmod(path, mode)
        case .tcp(let host, let port):
            server = try await bootstrap.bind(host: host, port: port).get()
        case .inherited(let fd):
            server = try await bootstrap.withBoundSocket(NIOBSDSocket.Handle(fd)).get()
        }
        // What the socket is, from the socket: a passed one may be either kind, a port may be 0.
        let local = server.localAddress
        // A socket systemd passed may be bound to any address; only a loopback one keeps other hosts out.
        if let local, let ip = local.ipAddress, !Loopback.isLiteral(ip) {
            try? await server.close()
            throw ListenRefused(address: local.protocol == .inet6 ? "[\(ip)]:\(local.port ?? 0)" : "\(ip):\(local.port ?? 0)")
        }
        if local?.ipAddress != nil {
            logger.warning("listening on TCP: any local user can use this proxy, and so the session's token")
        }
        let nanoseconds = { (duration: Duration) in TimeAmount.nanoseconds(Int64(duration.components.seconds) * 1_000_000_000) }
        settingsBox.withLock {
            $0 = Settings(
                upstream: upstream, credentials: credentials, bodyBudget: bodyBudget, bufferLimit: bufferLimit,
                bodyTimeout: nanoseconds(bodyTimeout), headerTimeout: nanoseconds(headerTimeout), timeout: nanoseconds(timeout),
                maxConnections: maxConnections, pages: WebPages(listeningOn: local), logger: logger)
        }
        try await server.setOption(.autoRead, value: true).get()
        logger.notice("listening", metadata: ["address": "\(local.map { "\($0)" } ?? "\(address)")", "upstream": "\(upstream.base)\(upstream.prefix)"])
        try await server.closeFuture.get()
    }

    /// The connecting process's uid (SO_PEERCRED) is this process's: one
    /// proxy serves one user, whom tokend's policy admits or refuses.
    static func peerIsThisUser(_ channel: Channel) -> EventLoopFuture<Bool> {
        struct UCred {
            var pid: Int32 = 0
            var uid: UInt32 = 0
            var gid: UInt32 = 0
        }
        guard let provider = channel as? SocketOptionProvider else { return channel.eventLoop.makeSucceededFuture(false) }
        let asked: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return asked.map { $0.uid == getuid() }.recover { _ in false }
    }
}

/// A passed socket bound to an address other hosts can reach.
struct ListenRefused: Error {
    let address: String
}

extension ListenAddress: CustomStringConvertible {
    var description: String {
        switch self {
        case .unix(let path, _): "unix:\(path)"
        case .tcp(let host, let port): "tcp:\(host):\(port)"
        case .inherited(let fd): "fd \(fd) (socket activation)"
        }
    }
}
