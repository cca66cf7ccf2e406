import NIOCore
import Synchronization

/// Closes connections that hold resources without using them: a message left
/// incomplete for `frameTimeout`, no call and no data for `idleTimeout`, or
/// replies the client has not read (the socket not writable) for
/// `writeTimeout`. Sits before the frame decoder and sees raw bytes.
final class ConnectionGuard: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let limits: VarlinkServer.Limits
    /// Knows whether a call is in progress (the handler after the frame decoder).
    let calls: CallDecoder
    let onClose: @Sendable (String) -> Void
    private var lastRead = NIODeadline.now()
    /// The last byte received was not a NUL: a message is incomplete.
    private var partial = false
    private var unwritableSince: NIODeadline?
    private var timer: RepeatedTask?

    init(limits: VarlinkServer.Limits, calls: CallDecoder, onClose: @escaping @Sendable (String) -> Void) {
        self.limits = limits
        self.calls = calls
        self.onClose = onClose
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleRepeatedTask(initialDelay: limits.checkInterval, delay: limits.checkInterval) { _ in
            let (handler, context) = loopBound.value
            handler.check(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        if let last = buffer.readableBytesView.last {
            partial = last != 0
            lastRead = .now()
        }
        context.fireChannelRead(data)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        unwritableSince = context.channel.isWritable ? nil : (unwritableSince ?? .now())
        context.fireChannelWritabilityChanged()
    }

    func check(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        let busy = calls.queued > 0
        var reason: String?
        if partial, now - lastRead > limits.frameTimeout {
            reason = "incomplete message for \(limits.frameTimeout.nanoseconds / 1_000_000_000) s"
        } else if let since = unwritableSince, now - since > limits.writeTimeout {
            reason = "replies not read for \(limits.writeTimeout.nanoseconds / 1_000_000_000) s"
        } else if !busy, !partial, now - max(lastRead, calls.lastAnswered) > limits.idleTimeout {
            reason = "idle for \(limits.idleTimeout.nanoseconds / 1_000_000_000) s"
        }
        guard let reason else { return }
        timer?.cancel()
        timer = nil
        onClose(reason)
        context.close(promise: nil)
    }
}

/// Connections being served, against the limit.
final class ConnectionCount: Sendable {
    private let count = Mutex(0)

    /// Counts the connection in unless the limit is reached.
    func admit(limit: Int) -> Bool {
        count.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func release() { count.withLock { $0 -= 1 } }
}
