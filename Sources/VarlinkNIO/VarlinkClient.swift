import NIOCore
import NIOPosix
import Varlink

/// A Varlink client on a Unix stream socket. Calls may be issued from many
/// tasks at once: they are pipelined and their replies matched in order.
public final class VarlinkClient: Sendable {
    let channel: Channel

    init(channel: Channel) {
        self.channel = channel
    }

    /// Connects to the socket at `path`.
    public static func connect(
        path: String, maximumFrameLength: Int = 16 << 20,
        eventLoopGroup: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> VarlinkClient {
        let channel = try await ClientBootstrap(group: eventLoopGroup)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(NULFrameDecoder(maximumFrameLength: maximumFrameLength)),
                        ReplyMatcher(),
                    ])
                }
            }
            .connect(unixDomainSocketPath: path).get()
        return VarlinkClient(channel: channel)
    }

    /// Calls a method that answers once. An error reply is thrown as VarlinkError.
    public func call(_ method: String, _ parameters: JSONObject = [:]) async throws -> JSONObject {
        let promise = channel.eventLoop.makePromise(of: VarlinkReply.self)
        let call = VarlinkCall(method: method, parameters: parameters)
        do {
            try await channel.writeAndFlush(Outgoing(call: call, pending: .single(promise))).get()
        } catch {
            promise.fail(error)  // never written, so never answered (a no-op if the handler failed it)
            throw error
        }
        let reply = try await promise.futureResult.get()
        if let error = reply.error { throw VarlinkError(error, reply.parameters) }
        return reply.parameters
    }

    /// Calls a method with `more`: each reply's parameters, until the last one.
    /// An error reply ends the sequence by throwing VarlinkError.
    public func stream(_ method: String, _ parameters: JSONObject = [:]) -> AsyncThrowingStream<JSONObject, Error> {
        let (stream, continuation) = AsyncThrowingStream<JSONObject, Error>.makeStream()
        let call = VarlinkCall(method: method, parameters: parameters, more: true)
        channel.writeAndFlush(Outgoing(call: call, pending: .stream(continuation))).whenFailure {
            continuation.finish(throwing: $0)
        }
        return stream
    }

    public func close() async {
        try? await channel.close()
    }
}

struct Outgoing {
    enum Pending {
        case single(EventLoopPromise<VarlinkReply>)
        case stream(AsyncThrowingStream<JSONObject, Error>.Continuation)
    }
    let call: VarlinkCall
    let pending: Pending?
}

/// Encodes calls and hands each reply to the oldest call still waiting.
final class ReplyMatcher: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Outgoing
    typealias OutboundOut = ByteBuffer

    private var waiting = CircularBuffer<Outgoing.Pending>()

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let outgoing = unwrapOutboundIn(data)
        var bytes: [UInt8] = []
        outgoing.call.encode(into: &bytes)
        if let pending = outgoing.pending { waiting.append(pending) }
        context.write(wrapOutboundOut(ByteBuffer(bytes: bytes)), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard let pending = waiting.first else {
            context.fireErrorCaught(VarlinkProtocolError("reply without a call"))
            context.close(promise: nil)
            return
        }
        let reply: VarlinkReply
        do {
            reply = try VarlinkReply(frame: frame.readableBytesView)
        } catch {
            failAll(error)
            context.close(promise: nil)
            return
        }
        switch pending {
        case .single(let promise):
            waiting.removeFirst()
            promise.succeed(reply)
        case .stream(let continuation):
            if let error = reply.error {
                waiting.removeFirst()
                continuation.finish(throwing: VarlinkError(error, reply.parameters))
            } else {
                continuation.yield(reply.parameters)
                if !reply.continues {
                    waiting.removeFirst()
                    continuation.finish()
                }
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        failAll(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(ConnectionClosed())
        context.fireChannelInactive()
    }

    private func failAll(_ error: Error) {
        while let pending = waiting.popFirst() {
            switch pending {
            case .single(let promise): promise.fail(error)
            case .stream(let continuation): continuation.finish(throwing: error)
            }
        }
    }
}

/// The server closed the connection before answering.
public struct ConnectionClosed: Error, CustomStringConvertible {
    public var description: String { "the connection was closed before the reply arrived" }
}
