import NIOCore
import Synchronization

/// At most `limit` connections are served at once, counted in the order the
/// listener accepts them (on its event loop), so that a connection accepted
/// after the limit was reached is the one refused, whichever event loop
/// serves it.
final class Admission: Sendable {
    private struct State {
        var open = 0
        var refused: Set<ObjectIdentifier> = []
    }
    private let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    /// An accepted connection: counted until it closes, or marked refused.
    func accept(_ channel: Channel) {
        let admitted = state.withLock { state in
            guard state.open < limit else {
                state.refused.insert(ObjectIdentifier(channel))
                return false
            }
            state.open += 1
            return true
        }
        let id = ObjectIdentifier(channel)
        channel.closeFuture.whenComplete { _ in
            self.state.withLock { state in
                // A refused connection that closed before it was set up leaves no mark another could inherit.
                if admitted { state.open -= 1 } else { state.refused.remove(id) }
            }
        }
    }

    /// Whether the connection was admitted when it was accepted (asked once, as it is set up).
    func admitted(_ channel: Channel) -> Bool {
        state.withLock { $0.refused.remove(ObjectIdentifier(channel)) == nil }
    }
}

/// On the listener: each accepted connection passes `Admission` before it is set up.
final class AdmissionHandler: ChannelInboundHandler {
    typealias InboundIn = Channel
    private let admission: Admission

    init(_ admission: Admission) { self.admission = admission }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        admission.accept(unwrapInboundIn(data))
        context.fireChannelRead(data)
    }
}
