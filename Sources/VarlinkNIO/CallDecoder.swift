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
/// Connections reach SwiftNIO from the front loop only for a `more` call, a
/// message the loop could not take, or to be refused, so every call here goes
/// to the task; cached calls are answered on the front loop (FrontLoop).
final class CallDecoder: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = InboundCall

    /// Calls handed to the task and not yet answered. Event loop only, as is the rest.
    private(set) var queued = 0
    private(set) var lastAnswered = NIODeadline.now()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let inbound: InboundCall
        do {
            inbound = .call(try VarlinkCall(frame: frame.readableBytesView))
        } catch {
            inbound = .malformed("\(error)")
        }
        queued += 1
        context.fireChannelRead(wrapInboundOut(inbound))
    }

    /// Called on the event loop once the task has written a call's last reply.
    func answeredByTask() {
        queued -= 1
        lastAnswered = .now()
    }
}
