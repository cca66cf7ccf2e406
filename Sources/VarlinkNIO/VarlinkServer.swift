import Logging
import NIOCore
import NIOPosix
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Where the server's listening socket comes from.
public enum ListenSource: Sendable {
    /// Bind this path; `mode` is applied to the socket file.
    case path(String, mode: mode_t)
    /// A socket already bound and listening, e.g. passed by systemd.
    case fileDescriptor(CInt)
}

/// Serves a VarlinkService on a Unix stream socket.
///
/// Each connection is one child task. Calls on a connection are answered in
/// order; a `more` call occupies its connection until its last reply. A
/// connection that sends garbage or an oversized frame is answered (where
/// possible) and closed; the server and other connections are unaffected.
public struct VarlinkServer: Sendable {
    public struct Limits: Sendable {
        public var maximumFrameLength = 1 << 20
        public init() {}
    }

    let service: VarlinkService
    let source: ListenSource
    let limits: Limits
    let logger: Logger
    let oversizedFrameError: VarlinkError

    public init(
        service: VarlinkService, source: ListenSource, limits: Limits = Limits(), logger: Logger,
        oversizedFrameError: VarlinkError = .invalidParameter("message")
    ) {
        self.service = service
        self.source = source
        self.limits = limits
        self.logger = logger
        self.oversizedFrameError = oversizedFrameError
    }

    typealias Connection = (channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerCredentials?)

    /// Binds (or adopts) the socket; `onListening` runs once it accepts
    /// connections. Returns when the task is cancelled or the socket fails.
    public func run(
        eventLoopGroup: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @Sendable () async -> Void = {}
    ) async throws {
        let maximumFrameLength = limits.maximumFrameLength
        let initializer: @Sendable (Channel) -> EventLoopFuture<Connection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(NULFrameDecoder(maximumFrameLength: maximumFrameLength)))
                return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }.flatMap { asyncChannel in
                PeerCredentials.of(channel).map { (asyncChannel, $0) }
            }
        }
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 256)
        let server: NIOAsyncChannel<Connection, Never>
        switch source {
        case .path(let path, let mode):
            server = try await bootstrap.bind(
                unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
            guard chmod(path, mode) == 0 else {
                try? await server.channel.close()
                throw SocketSetupError(path: path, operation: "chmod", errno: errno)
            }
        case .fileDescriptor(let fd):
            server = try await bootstrap.bind(fd, childChannelInitializer: initializer)
        }
        await onListening()
        try await withTaskCancellationHandler {
            try await server.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in inbound {
                        group.addTask { await self.serve(connection) }
                    }
                }
            }
        } onCancel: {
            server.channel.close(promise: nil)
        }
    }

    /// Serves one connection. Never throws: a failing client only ends itself.
    func serve(_ connection: Connection) async {
        let peer = connection.peer
        var logger = self.logger
        if let peer {
            logger[metadataKey: "peer.uid"] = "\(peer.uid)"
            logger[metadataKey: "peer.pid"] = "\(peer.pid)"
        }
        do {
            try await connection.channel.executeThenClose { inbound, outbound in
                let send: @Sendable (VarlinkReply) async throws -> Void = { reply in
                    var bytes: [UInt8] = []
                    reply.encode(into: &bytes)
                    do {
                        try await outbound.write(ByteBuffer(bytes: bytes))
                    } catch {
                        throw ReplyStreamClosed()
                    }
                }
                // Streamed replies (events) return once written to the socket,
                // so a publisher knows its subscribers have them.
                let channel = connection.channel.channel
                let sendStreamed: @Sendable (VarlinkReply) async throws -> Void = { reply in
                    var bytes: [UInt8] = []
                    reply.encode(into: &bytes)
                    do {
                        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
                    } catch {
                        throw ReplyStreamClosed()
                    }
                }
                do {
                    for try await frame in inbound {
                        let call: VarlinkCall
                        do {
                            call = try VarlinkCall(frame: frame.readableBytesView)
                        } catch {
                            logger.notice("closing connection: malformed message", metadata: ["problem": "\(error)"])
                            return
                        }
                        try await service.handle(call, peer: peer, send: send, sendStreamed: sendStreamed)
                    }
                } catch let error as FrameTooLarge {
                    logger.notice("closing connection: message too large", metadata: ["limit": "\(error.limit)"])
                    try? await send(VarlinkReply(oversizedFrameError))
                }
            }
        } catch {
            logger.debug("connection ended", metadata: ["reason": "\(error)"])
        }
    }
}

public struct SocketSetupError: Error, CustomStringConvertible {
    public let path: String
    public let operation: String
    public let errno: Int32
    public var description: String { "\(operation) \(path): \(String(cString: strerror(errno)))" }
}
