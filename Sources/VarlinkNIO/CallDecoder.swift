import NIOCore
import Varlink

/// What the connection's task receives: a parsed call, or why a frame is not one.
enum InboundCall: Sendable {
    case call(VarlinkCall)
    case malformed(String)
}

/// Parses each frame once, on the event loop, and keeps count of the calls
/// handed to the connection's task and not yet answered (the connection
/// guard reads it: a connection with such a call is not idle).
///
/// With a fast path, some calls are answered right here, without a hop to the
/// task: a server-supplied function returns the encoded reply frame when it
/// can answer at once (e.g. a cached token), nil otherwise. While any call
/// handed to the task is unanswered every later call follows it, so replies
/// stay in order; a client that does not read gets the task's back-pressure.
final class CallDecoder: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = InboundCall
    typealias OutboundOut = ByteBuffer

    let answer: VarlinkServer.FastPath?
    let peer: PeerCredentials?
    /// Calls handed to the task and not yet answered. Event loop only, as is the rest.
    private(set) var queued = 0
    private(set) var lastAnswered = NIODeadline.now()
    private var output: ByteBuffer?
    /// The last frame parsed and its call: a client repeating a call (most ask
    /// for a token the same way every time) is not parsed again.
    private var lastFrame: ByteBuffer?
    private var lastCall: VarlinkCall?

    init(answer: VarlinkServer.FastPath?, peer: PeerCredentials?) {
        self.answer = answer
        self.peer = peer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let inbound: InboundCall
        do {
            let call: VarlinkCall
            if let lastCall, frame == lastFrame {
                call = lastCall
            } else {
                call = try VarlinkCall(frame: frame.readableBytesView)
                lastFrame = frame
                lastCall = call
            }
            if queued == 0, context.channel.isWritable, let answer, var reply = answer(call, peer) {
                if var buffer = output {
                    buffer.writeBuffer(&reply)
                    output = buffer
                } else {
                    output = reply  // shared with the cache, copied only if written to
                }
                return
            }
            inbound = .call(call)
        } catch {
            inbound = .malformed("\(error)")
        }
        flushAnswers(context: context)
        queued += 1
        context.fireChannelRead(wrapInboundOut(inbound))
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

    /// Called on the event loop once the task has written a call's last reply.
    func answeredByTask() {
        queued -= 1
        lastAnswered = .now()
    }
}
