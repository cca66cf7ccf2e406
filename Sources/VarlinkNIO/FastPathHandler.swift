import NIOCore
import Varlink

/// Answers some calls on the event loop, without a hop to the connection's
/// task: a server-supplied function gets each call and returns the encoded
/// reply frame when it can answer at once (e.g. a cached token), nil
/// otherwise. Calls it cannot answer go on to the connection's task, and while
/// any of those is unanswered every later call follows it, so replies stay
/// in order.
final class FastPathHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let answer: VarlinkServer.FastPath
    let peer: PeerCredentials?
    /// Calls handed to the task and not yet answered. Event loop only.
    private var queued = 0
    private var output: ByteBuffer?

    init(answer: @escaping VarlinkServer.FastPath, peer: PeerCredentials?) {
        self.answer = answer
        self.peer = peer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        // Only when nothing is queued (order) and the socket takes writes (a
        // client that does not read gets the task's back-pressure instead).
        if queued == 0, context.channel.isWritable, let call = try? VarlinkCall(frame: frame.readableBytesView),
            let reply = answer(call, peer)
        {
            var buffer = output ?? context.channel.allocator.buffer(capacity: reply.count)
            buffer.writeBytes(reply)
            output = buffer
            return
        }
        flushAnswers(context: context)
        queued += 1
        context.fireChannelRead(data)
    }

    /// Replies written at the end of a read burst: pipelined calls share one write.
    func channelReadComplete(context: ChannelHandlerContext) {
        flushAnswers(context: context)
        context.fireChannelReadComplete()
    }

    private func flushAnswers(context: ChannelHandlerContext) {
        guard let buffer = output else { return }
        output = nil
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
    }

    /// Called on the event loop once the task has written a queued call's last reply.
    func answeredByTask() {
        queued -= 1
    }
}
