import NIOCore
import NIOPosix
import NIOSSL

/// What an upstream connection tells the request it serves.
protocol UpstreamUser: AnyObject {
    func upstreamActive()
    func upstreamReceived(_ part: ResponsePart)
    func upstreamReadComplete()
    func upstreamWritabilityChanged(writable: Bool)
    func upstreamFailed(_ error: any Error)
}

/// The upstream's connections on one event loop, kept open between requests
/// (HTTP/1.1 keep-alive). A client connection and the upstream connections
/// serving it share its event loop, so a request never changes threads.
final class UpstreamPool {
    let loop: EventLoop
    let upstream: Upstream
    let tls: NIOSSLContext?
    /// Idle connections kept; more are closed when their request ends.
    let keep: Int
    private var idle: [UpstreamConnection] = []

    init(loop: EventLoop, upstream: Upstream, tls: NIOSSLContext?, keep: Int) {
        self.loop = loop
        self.upstream = upstream
        self.tls = tls
        self.keep = keep
    }

    /// A kept connection that is still open, if there is one.
    func idleConnection() -> UpstreamConnection? {
        while let connection = idle.popLast() {
            if connection.channel.isActive && !connection.closing && !connection.hasUnaskedBytes {
                connection.reused = true
                return connection
            }
        }
        return nil
    }

    /// A new connection; `done` runs on the loop.
    func connect(_ done: @escaping (Result<UpstreamConnection, any Error>) -> Void) {
        let tls = self.tls
        let name = upstream.host
        let serverHostname = name.contains(":") || name.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : name
        let connecting = ClientBootstrap(group: loop)
            .connectTimeout(.seconds(10))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if let tls { try pipeline.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname)) }
                    try pipeline.addHandler(UpstreamConnection(channel: channel))
                }
            }
            .connect(host: upstream.host, port: upstream.port)
        connecting.assumeIsolated().whenComplete { result in
            done(
                result.flatMap { channel in
                    Result { try channel.pipeline.syncOperations.handler(type: UpstreamConnection.self) }
                })
        }
    }

    /// A connection whose request is over: kept for the next one if it can serve it, else closed.
    func release(_ connection: UpstreamConnection, reusable: Bool) {
        connection.user = nil
        connection.resumeReading()
        // Bytes after the answer's end are none a request asked for: the connection cannot be trusted again.
        if reusable && !connection.hasUnaskedBytes && connection.channel.isActive && idle.count < keep {
            idle.append(connection)
        } else {
            connection.close()
        }
    }

    /// One pool per event loop of `group`, each used only on its loop.
    static func pools(
        for group: any EventLoopGroup, upstream: Upstream, tls: NIOSSLContext?, keep: Int
    ) async throws -> [ObjectIdentifier: NIOLoopBound<UpstreamPool>] {
        var pools: [ObjectIdentifier: NIOLoopBound<UpstreamPool>] = [:]
        for loop in group.makeIterator() {
            pools[ObjectIdentifier(loop)] = try await loop.submit {
                NIOLoopBound(UpstreamPool(loop: loop, upstream: upstream, tls: tls, keep: keep), eventLoop: loop)
            }.get()
        }
        return pools
    }
}

/// One connection to the upstream: its answers go to the request it serves.
final class UpstreamConnection: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let channel: Channel
    private var context: ChannelHandlerContext?
    var user: UpstreamUser?
    /// It served a request before this one (a kept connection the upstream may have closed meanwhile).
    var reused = false
    private var reading = true
    private var decoder = ResponseDecoder()

    /// The proxy closes it (a TLS connection stays active while its close_notify goes out).
    private(set) var closing = false

    func close() {
        closing = true
        channel.close(promise: nil)
    }

    /// Bytes came that no answer has taken.
    var hasUnaskedBytes: Bool { decoder.hasBytes }

    init(channel: Channel) { self.channel = channel }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func write(_ bytes: ByteBuffer) {
        context?.write(wrapOutboundOut(bytes), promise: nil)
    }

    /// A byte came since the request was written.
    private(set) var answerBegun = false

    /// The request written next is HEAD (its answer has no body) or not.
    func expectAnswer(toHead: Bool) {
        decoder.toHead = toHead
        answerBegun = false
    }

    func flush() { context?.flush() }

    func writeAndFlush(_ bytes: ByteBuffer) {
        context?.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
    }

    /// The client does not take the answer as fast as it comes: the upstream's socket is not read meanwhile.
    func pauseReading() {
        guard reading else { return }
        reading = false
        try? channel.syncOptions?.setOption(.autoRead, value: false)
    }

    func resumeReading() {
        guard !reading else { return }
        reading = true
        try? channel.syncOptions?.setOption(.autoRead, value: true)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let user {
            answerBegun = true
            user.upstreamActive()
        }
        decoder.append(unwrapInboundIn(data))
        // The user changes when an answer ends: its request is over, the connection pooled or closed.
        while let user {
            let part: ResponsePart?
            do {
                part = try decoder.next()
            } catch {
                self.user = nil
                close()
                user.upstreamFailed(error)
                return
            }
            guard let part else { return }
            user.upstreamReceived(part)
        }
        if decoder.hasBytes { close() }  // nothing asked for these
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        user?.upstreamReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        user?.upstreamWritabilityChanged(writable: context.channel.isWritable)
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A body read until the connection closes ends here; any other answer is cut.
        if let user, let end = decoder.closed() { return user.upstreamReceived(end) }
        let user = self.user
        self.user = nil
        user?.upstreamFailed(UpstreamClosed())
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let user = self.user
        self.user = nil
        user?.upstreamFailed(error)
        close()
    }
}

/// The upstream closed the connection before its answer was whole.
struct UpstreamClosed: Error, CustomStringConvertible {
    var description: String { "the upstream closed the connection" }
}

/// The upstream said nothing for `--timeout`.
struct UpstreamTimedOut: Error, CustomStringConvertible {
    var description: String { "the upstream did not answer in time" }
}
