import NIOCore
import NIOSSL
import Synchronization

/// ParameterStatus as the server last said it (server_version, TimeZone…).
final class ServerParameters: Sendable {
    let values = Mutex<[String: String]>([:])
}

/// On the event loop: hands the server's messages to the inbox, notifications to their streams,
/// keeps ParameterStatus, drops notices, and turns a failure or a close into the inbox's error.
final class PostgresHandler: ChannelInboundHandler {
    typealias InboundIn = BackendMessage

    let inbox: Inbox
    let listeners: Listeners
    let parameters: ServerParameters

    init(inbox: Inbox, listeners: Listeners, parameters: ServerParameters) {
        self.inbox = inbox
        self.listeners = listeners
        self.parameters = parameters
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .notification(let notification): listeners.deliver(notification)
        case .parameterStatus(let name, let value): parameters.values.withLock { $0[name] = value }
        // Warnings about statements tokend chose; nothing to act on.
        case .notice: break
        case let message:
            if !inbox.deliver(message) {
                errorCaught(context: context, error: PostgresError(.protocolViolation, "the server sent more than \(inbox.limit) messages unread"))
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let failure: PostgresError
        if let error = error as? PostgresError {
            failure = error
        } else if case .uncleanShutdown? = error as? NIOSSLError {
            // The server went away without TLS's goodbye: a lost connection, not a TLS failure.
            failure = PostgresError(.connectionClosed, "the server closed the connection")
        } else {
            failure = PostgresError(.connectionError, "the connection failed", underlying: error)
        }
        inbox.fail(failure)
        listeners.end(failure)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let closed = PostgresError(.connectionClosed, "the connection closed")
        inbox.fail(closed)
        listeners.end(closed)
        context.fireChannelInactive()
    }
}
