import AsyncHTTPClient
import Foundation
import Logging
import Loopback
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TokendClient

#if canImport(Glibc)
import Glibc
#endif

typealias HTTPConnection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

/// The listener (SwiftNIO HTTP/1), the upstream client (AsyncHTTPClient) and
/// tokend, for every connection.
final class Proxy: Sendable {
    let upstream: Upstream
    let session: String?
    let tokendSocket: String?
    let bufferLimit: Int
    let bodyBudget: BodyBudget
    let bodyTimeout: Duration
    let headerTimeout: Duration
    let maxConnections: Int
    let timeout: Duration
    let logger: Logger
    let http: HTTPClient
    private let tokend = Mutex<TokendClient?>(nil)
    /// Connections being served: at most `maxConnections`, so that memory is bounded in total.
    private let open = Mutex(0)

    init(
        upstream: Upstream, session: String?, tokendSocket: String?, bufferLimit: Int, bodyBudget: Int,
        bodyTimeout: Duration, headerTimeout: Duration, maxConnections: Int, timeout: Duration, logger: Logger
    ) {
        self.upstream = upstream
        self.session = session
        self.tokendSocket = tokendSocket
        self.bufferLimit = bufferLimit
        self.bodyBudget = BodyBudget(limit: bodyBudget)
        self.bodyTimeout = bodyTimeout
        self.headerTimeout = headerTimeout
        self.maxConnections = maxConnections
        self.timeout = timeout
        self.logger = logger
        var configuration = HTTPClient.Configuration()
        // A redirect would carry the token elsewhere: the client gets it as it is.
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(Int64(timeout.components.seconds)))
        configuration.decompression = .disabled
        // Every client connection may have a request upstream at once (AsyncHTTPClient's default is 8).
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 1024
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// What one connection may hold before the proxy takes it: a few parts of at most 64 KiB
    /// (NIO's largest read), not NIO's default ten; reading stops until the proxy takes them.
    static let connectionBuffer = HTTPConnection.Configuration(backPressureStrategy: .init(lowWatermark: 1, highWatermark: 2))

    /// Serves until the listener fails; the upstream client is shut down either way (it must be, before it goes).
    func run(on address: ListenAddress) async throws {
        do {
            try await listen(on: address)
        } catch {
            try? await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }

    private func listen(on address: ListenAddress) async throws {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
        let initializer: @Sendable (Channel) -> EventLoopFuture<HTTPConnection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                return try HTTPConnection(wrappingChannelSynchronously: channel, configuration: Self.connectionBuffer)
            }
        }
        let server: NIOAsyncChannel<HTTPConnection, Never>
        switch address {
        case .unix(let path, let mode):
            server = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
            chmod(path, mode)
        case .tcp(let host, let port):
            server = try await bootstrap.bind(host: host, port: port, childChannelInitializer: initializer)
        case .inherited(let fd):
            server = try await bootstrap.bind(NIOBSDSocket.Handle(fd), childChannelInitializer: initializer)
        }
        // What the socket is, from the socket: a passed one may be either kind, a port may be 0.
        let local = server.channel.localAddress
        // A socket systemd passed may be bound to any address; only a loopback one keeps other hosts out.
        if let local, let ip = local.ipAddress, !Loopback.isLiteral(ip) {
            try? await server.channel.close()
            throw ListenRefused(address: local.protocol == .inet6 ? "[\(ip)]:\(local.port ?? 0)" : "\(ip):\(local.port ?? 0)")
        }
        if local?.ipAddress != nil {
            logger.warning("listening on TCP: any local user can use this proxy, and so the session's token")
        }
        let pages = WebPages(listeningOn: local)
        let unix = pages.hosts == nil
        logger.notice("listening", metadata: ["address": "\(local.map { "\($0)" } ?? "\(address)")", "upstream": "\(upstream.base)\(upstream.prefix)"])
        try await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { connections in
                for try await connection in connections {
                    let admitted = open.withLock { open in
                        guard open < maxConnections else { return false }
                        open += 1
                        return true
                    }
                    guard admitted else {
                        group.addTask { await self.refuseOverCap(connection) }
                        continue
                    }
                    group.addTask {
                        defer { self.open.withLock { $0 -= 1 } }
                        await self.serve(connection, unix: unix, pages: pages)
                    }
                }
            }
        }
    }

    /// One client connection: its requests one after another (HTTP/1.1 keep-alive).
    func serve(_ connection: HTTPConnection, unix: Bool, pages: WebPages) async {
        let allowed = unix ? await Self.peerIsThisUser(connection.channel) : true
        do {
            try await connection.executeThenClose { inbound, outbound in
                var parts = inbound.makeAsyncIterator()
                // The next request's head must be whole within --header-timeout of the connection's start or
                // of the previous answer: an idle or half-sent head does not keep a connection forever.
                while let part = try await waitingForHead(connection.channel, { try await $0.next(&parts) }) {
                    guard case .head(let head) = part else { continue }
                    let keepAlive = try await watching(head, connection.channel, outbound) { watch in
                        if let refusal = allowed ? pages.refusal(for: head) : .forbidden {
                            try await skipBody(&parts, watch)
                            logger.warning("refused a request", metadata: ["reason": "\(refusal.message)"])
                            try await refusal.write(to: outbound, version: head.version, close: true)
                            return false
                        }
                        return try await handle(head, &parts, watch, outbound)
                    }
                    if !keepAlive || !head.isKeepAlive { return }
                }
            }
        } catch {
            logger.debug("connection ended", metadata: ["reason": "\(error)"])
        }
    }

    /// `body` with a watch on the request's body: 408 and the connection closed if it stalls.
    func watching<T>(
        _ head: HTTPRequestHead, _ channel: Channel, _ outbound: Writer, _ body: (StallWatch) async throws -> T
    ) async throws -> T {
        let watch = StallWatch(timeout: bodyTimeout)
        let answer = Answer(status: .requestTimeout, message: "the request body stalled for \(bodyTimeout.components.seconds) s")
        let timer = Task {
            await watch.run {
                try? await answer.write(to: outbound, version: head.version, close: true)
                try? await channel.close()
            }
        }
        defer {
            watch.finish()
            timer.cancel()
        }
        return try await body(watch)
    }

    /// `body` (reading a request's head) with a watch: 408 and the connection closed if no whole head comes in time.
    func waitingForHead<T>(_ channel: Channel, _ body: (StallWatch) async throws -> T) async throws -> T {
        let watch = StallWatch(timeout: headerTimeout)
        let answer = Answer(
            status: .requestTimeout, message: "no whole request head came within \(headerTimeout.components.seconds) s")
        let timer = Task { await watch.run { await answer.writeAndClose(on: channel) } }
        defer {
            watch.finish()
            timer.cancel()
        }
        return try await body(watch)
    }

    /// A connection over `--max-connections`: 503, and closed before the proxy reads it.
    func refuseOverCap(_ connection: HTTPConnection) async {
        logger.warning("refused a connection over the cap", metadata: ["max-connections": "\(maxConnections)"])
        await Answer(status: .serviceUnavailable, message: "the proxy serves \(maxConnections) connections at most; try again")
            .writeAndClose(on: connection.channel)
    }

    /// The connecting process's uid (SO_PEERCRED) is this process's: one
    /// proxy serves one user, whom tokend's policy admits or refuses.
    static func peerIsThisUser(_ channel: Channel) async -> Bool {
        struct UCred {
            var pid: Int32 = 0
            var uid: UInt32 = 0
            var gid: UInt32 = 0
        }
        guard let provider = channel as? SocketOptionProvider else { return false }
        let asked: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        guard let credentials = try? await asked.get() else { return false }
        return credentials.uid == getuid()
    }

    /// The rest of a request's body, read and dropped: the connection stays usable.
    func skipBody(_ parts: inout Parts, _ watch: StallWatch) async throws {
        while let part = try await watch.next(&parts) {
            if case .end = part { return }
        }
        throw ClientGone()
    }

    /// tokend, connected once and again after it restarts (one retry on a new connection).
    func withTokend<T: Sendable>(_ body: (TokendClient) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            let client = try await connectedTokend()
            do {
                return try await body(client)
            } catch let error as TokendClientError {
                guard case .unreachable(_, let reason) = error, attempt == 1 else { throw error }
                tokend.withLock { $0 = nil }
                logger.info("reconnecting to tokend", metadata: ["reason": "\(reason)"])
                await client.close()
            }
        }
    }

    private func connectedTokend() async throws -> TokendClient {
        if let existing = tokend.withLock({ $0 }) { return existing }
        let client = try await TokendClient.connect(socket: tokendSocket)
        tokend.withLock { $0 = client }
        return client
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
