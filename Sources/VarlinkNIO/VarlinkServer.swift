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
    /// What one client may hold. Every limit is documented in README.
    public struct Limits: Sendable {
        public var maximumFrameLength = 1 << 20
        /// Connections served at once; more are answered `overloadedError` and closed.
        public var maximumConnections = 512
        /// A connection with no call in progress and no data for this long is closed.
        public var idleTimeout = TimeAmount.seconds(300)
        /// A message begun but not finished within this time closes the connection.
        public var frameTimeout = TimeAmount.seconds(10)
        /// Replies the client does not read for this long (socket buffer and
        /// the write buffer full) close the connection.
        public var writeTimeout = TimeAmount.seconds(30)
        /// Outbound bytes buffered per connection before writes wait.
        public var writeBufferHighWatermark = 64 * 1024
        var checkInterval = TimeAmount.seconds(1)
        public init() {}
    }

    let service: VarlinkService
    let source: ListenSource
    let limits: Limits
    let logger: Logger
    /// Answers a call on the event loop when it can (returns the encoded
    /// reply frame, NUL included), or returns nil to let the service handle it.
    public typealias FastPath = @Sendable (VarlinkCall, PeerCredentials?) -> ByteBuffer?

    let oversizedFrameError: VarlinkError
    let overloadedError: VarlinkError
    let fastPath: FastPath?
    let open = ConnectionCount()

    public init(
        service: VarlinkService, source: ListenSource, limits: Limits = Limits(), logger: Logger,
        oversizedFrameError: VarlinkError = .invalidParameter("message"),
        overloadedError: VarlinkError = VarlinkError("org.varlink.service.InternalError"),
        fastPath: FastPath? = nil
    ) {
        self.fastPath = fastPath
        self.service = service
        self.source = source
        self.limits = limits
        self.logger = logger
        self.oversizedFrameError = oversizedFrameError
        self.overloadedError = overloadedError
    }

    typealias Connection = (
        channel: NIOAsyncChannel<InboundCall, ByteBuffer>, peer: PeerCredentials?,
        callAnswered: @Sendable () -> Void, admitted: Bool
    )

    /// Binds (or adopts) the socket; `onListening` runs once it accepts
    /// connections. Returns when the task is cancelled or the socket fails.
    public func run(
        eventLoopGroup: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @Sendable () async -> Void = {}
    ) async throws {
        let limits = self.limits
        let logger = self.logger
        let fastPath = self.fastPath
        let open = self.open
        let initializer: @Sendable (Channel) -> EventLoopFuture<Connection> = { channel in
            PeerCredentials.of(channel).flatMapThrowing { peer in
                let admitted = open.admit(limit: limits.maximumConnections)
                if admitted { channel.closeFuture.whenComplete { _ in open.release() } }
                let calls = CallDecoder(answer: admitted ? fastPath : nil, peer: peer)
                let pipeline = channel.pipeline.syncOperations
                try pipeline.addHandler(
                    ConnectionGuard(limits: limits, calls: calls) { reason in
                        logger.notice("closing connection", metadata: ["reason": "\(reason)"])
                    })
                try pipeline.addHandler(
                    ByteToMessageHandler(NULFrameDecoder(maximumFrameLength: limits.maximumFrameLength)))
                try pipeline.addHandler(calls)
                let bound = NIOLoopBound(calls, eventLoop: channel.eventLoop)
                let eventLoop = channel.eventLoop
                let callAnswered: @Sendable () -> Void = { eventLoop.execute { bound.value.answeredByTask() } }
                let configuration = NIOAsyncChannel<InboundCall, ByteBuffer>.Configuration(
                    backPressureStrategy: .init(lowWatermark: 2, highWatermark: 16))
                _ = channel.setOption(
                    ChannelOptions.writeBufferWaterMark,
                    value: .init(low: limits.writeBufferHighWatermark / 2, high: limits.writeBufferHighWatermark))
                let asyncChannel = try NIOAsyncChannel<InboundCall, ByteBuffer>(
                    wrappingChannelSynchronously: channel, configuration: configuration)
                return (asyncChannel, peer, callAnswered, admitted)
            }
        }
        // A burst of clients (a worker pool starting) waits in the kernel's
        // queue rather than being refused with EAGAIN: the largest backlog the
        // system allows, drained up to 256 accepts per wake-up.
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: Self.systemBacklog())
            .serverChannelOption(.maxMessagesPerRead, value: 256)
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
                        group.addTask {
                            guard connection.admitted else { return await self.refuse(connection) }
                            await self.serve(connection)
                        }
                    }
                }
            }
        } onCancel: {
            server.channel.close(promise: nil)
        }
    }

    /// net.core.somaxconn: listen() silently caps any larger backlog to it.
    static func systemBacklog() -> Int32 {
        guard let file = fopen("/proc/sys/net/core/somaxconn", "r") else { return 4096 }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 32)
        guard fgets(&line, Int32(line.count), file) != nil else { return 4096 }
        let digits = line.prefix { $0 >= 0x30 && $0 <= 0x39 }.map { UInt8(bitPattern: $0) }
        guard let value = Int32(String(decoding: digits, as: UTF8.self)), value > 0 else { return 4096 }
        return value
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
                    do {
                        try await outbound.write(reply.frame)
                    } catch {
                        throw ReplyStreamClosed()
                    }
                }
                // Streamed replies (events) return once written to the socket,
                // so a publisher knows its subscribers have them.
                let channel = connection.channel.channel
                let sendStreamed: @Sendable (VarlinkReply) async throws -> Void = { reply in
                    do {
                        try await channel.writeAndFlush(reply.frame).get()
                    } catch {
                        throw ReplyStreamClosed()
                    }
                }
                do {
                    for try await inbound in inbound {
                        defer { connection.callAnswered() }
                        switch inbound {
                        case .malformed(let problem):
                            logger.notice("closing connection: malformed message", metadata: ["problem": "\(problem)"])
                            return
                        case .call(let call):
                            try await service.handle(call, peer: peer, send: send, sendStreamed: sendStreamed)
                        }
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

extension VarlinkServer {
    /// Over the connection limit: answers the client's first call with
    /// `overloadedError` and closes, so the client learns why.
    func refuse(_ connection: Connection) async {
        logger.warning(
            "connection refused: too many connections",
            metadata: [
                "limit": "\(limits.maximumConnections)",
                "peer.uid": "\(connection.peer.map { String($0.uid) } ?? "unknown")",
                "peer.pid": "\(connection.peer.map { String($0.pid) } ?? "unknown")",
            ])
        try? await connection.channel.executeThenClose { inbound, outbound in
            try await outbound.write(VarlinkReply(overloadedError).frame)
            // Wait (briefly) for the client's first message so that it reads the answer rather than a reset.
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { for try await _ in inbound { return } }
                group.addTask { try await Task.sleep(for: .seconds(1)) }
                try await group.next()
                group.cancelAll()
            }
        }
    }
}

extension VarlinkReply {
    /// The reply as one NUL-terminated frame.
    var frame: ByteBuffer {
        var bytes: [UInt8] = []
        encode(into: &bytes)
        return ByteBuffer(bytes: bytes)
    }
}

public struct SocketSetupError: Error, CustomStringConvertible {
    public let path: String
    public let operation: String
    public let errno: Int32
    public var description: String { "\(operation) \(path): \(String(cString: strerror(errno)))" }
}
