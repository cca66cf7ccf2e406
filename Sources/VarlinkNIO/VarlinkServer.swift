import CLinux
import Logging
import NIOCore
import NIOPosix
import Synchronization
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
/// A front loop on a thread of its own accepts and serves plain calls
/// (FrontLoop); a connection's first `more` call, or a message the loop
/// cannot take, moves it to SwiftNIO, where each connection is one child
/// task. Either way calls on a connection are answered in order; a `more`
/// call occupies its connection until its last reply. A connection that
/// sends garbage or an oversized frame is answered (where possible) and
/// closed; the server and other connections are unaffected.
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
    /// Answers a call on the front loop when it can (returns the encoded
    /// reply frame, NUL included), or returns nil to let the service handle it.
    public typealias FastPath = @Sendable (VarlinkCall, PeerCredentials?) -> [UInt8]?

    let oversizedFrameError: VarlinkError
    let overloadedError: VarlinkError
    let fastPath: FastPath?
    let open = ConnectionCount()
    /// The running front loop, for `ping`.
    let front = RunningFront()

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
    ///
    /// Connections arrive through the front loop (its own thread), which
    /// serves plain calls and hands a connection to SwiftNIO at its first
    /// `more` call (or a message it cannot take).
    public func run(
        eventLoopGroup: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @Sendable () async -> Void = {}
    ) async throws {
        let listener: CInt
        switch source {
        case .path(let path, let mode): listener = try Self.listen(path: path, mode: mode)
        case .fileDescriptor(let fd): listener = fd
        }
        let (handedOff, arrivals) = AsyncStream.makeStream(of: HandedOff.self)
        let open = self.open
        let front: FrontLoop
        do {
            front = try FrontLoop(
                listener: listener, limits: limits, fastPath: fastPath, service: service, open: open, logger: logger,
                handOff: { connection in
                    guard case .terminated = arrivals.yield(connection) else { return }
                    close(connection.fd)  // the server is stopping
                    if connection.admitted { open.release() }
                },
                ended: { arrivals.finish() })
        } catch {
            close(listener)
            throw error
        }
        front.start()
        self.front.loop.withLock { $0 = front }
        await onListening()
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                for await connection in handedOff {
                    group.addTask { await self.adopt(connection, eventLoopGroup: eventLoopGroup) }
                }
            }
        } onCancel: {
            front.stop()
            arrivals.finish()
        }
    }

    /// Returns once the server's front loop has come round (at once if it
    /// is not running); never, if it is stuck.
    public func ping() async {
        await front.loop.withLock { $0 }?.ping()
    }

    /// Test-only: the front loop stops for good (see the watchdog test).
    public func hangFrontLoopForTesting() {
        front.loop.withLock { $0 }?.hangForTesting()
    }

    /// A connection from the front loop, taken over by SwiftNIO for good.
    func adopt(_ handed: HandedOff, eventLoopGroup: EventLoopGroup) async {
        let connection: Connection
        do {
            connection = try await ClientBootstrap(group: eventLoopGroup).withConnectedSocket(handed.fd) { channel in
                channel.eventLoop.makeCompletedFuture { try self.setUp(channel, handed) }
            }
        } catch {
            logger.warning("cannot take over a connection", metadata: ["error": "\(error)"])
            return
        }
        if connection.admitted {
            await serve(connection)
        } else {
            await refuse(connection)
        }
    }

    /// The connection's pipeline: what the front loop owes it, the guard, framing, calls.
    func setUp(_ channel: Channel, _ handed: HandedOff) throws -> Connection {
        let open = self.open
        if handed.admitted { channel.closeFuture.whenComplete { _ in open.release() } }
        let calls = CallDecoder()
        let pipeline = channel.pipeline.syncOperations
        if !handed.unread.isEmpty || !handed.unwritten.isEmpty {
            try pipeline.addHandler(Replay(unread: handed.unread, unwritten: handed.unwritten))
        }
        let logger = self.logger
        try pipeline.addHandler(
            ConnectionGuard(limits: limits, calls: calls) { reason in
                logger.notice("closing connection", metadata: ["reason": "\(reason)"])
            })
        try pipeline.addHandler(ByteToMessageHandler(NULFrameDecoder(maximumFrameLength: limits.maximumFrameLength)))
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
        return (asyncChannel, handed.peer, callAnswered, handed.admitted)
    }

    /// A bound, listening Unix socket at `path` (a socket file left there is
    /// replaced). A burst of clients (a worker pool starting) waits in the
    /// kernel's queue rather than being refused with EAGAIN: the largest
    /// backlog the system allows.
    static func listen(path: String, mode: mode_t) throws -> CInt {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            throw SocketSetupError(path: path, operation: "bind", errno: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        var existing = stat()
        if lstat(path, &existing) == 0, existing.st_mode & S_IFMT == S_IFSOCK { unlink(path) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketSetupError(path: path, operation: "socket", errno: errno) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        func failure(_ operation: String) -> SocketSetupError {
            let error = SocketSetupError(path: path, operation: operation, errno: errno)
            close(fd)
            return error
        }
        guard bound == 0 else { throw failure("bind") }
        guard chmod(path, mode) == 0 else { throw failure("chmod") }
        guard Glibc.listen(fd, systemBacklog()) == 0 else { throw failure("listen") }
        return fd
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

final class RunningFront: Sendable {
    let loop = Mutex<FrontLoop?>(nil)
}

/// Puts back into a connection's stream, as SwiftNIO takes it over, what
/// the front loop owed it: the replies not yet written go out first, then the
/// bytes read and not answered go up the pipeline, before anything more is
/// read from the socket.
final class Replay: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let unread: [UInt8]
    let unwritten: [UInt8]

    init(unread: [UInt8], unwritten: [UInt8]) {
        self.unread = unread
        self.unwritten = unwritten
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        if !unwritten.isEmpty {
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: unwritten)), promise: nil)
        }
        if !unread.isEmpty {
            context.fireChannelRead(wrapInboundOut(ByteBuffer(bytes: unread)))
            context.fireChannelReadComplete()
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
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
