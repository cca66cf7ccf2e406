import NIOCore
import NIOSSL
import Synchronization

/// ParameterStatus as the server last said it (server_version, TimeZone…).
final class ServerParameters: Sendable {
    /// A server reports some twenty; a server that names more is refused, not remembered.
    static let limit = 64

    let values = Mutex<[String: String]>([:])

    /// False, and nothing kept, when `name` would be one more than `limit`.
    func set(_ name: String, _ value: String) -> Bool {
        values.withLock { values in
            guard values[name] != nil || values.count < Self.limit else { return false }
            values[name] = value
            return true
        }
    }
}

/// On the event loop: hands the server's messages to the inbox, notifications to their streams,
/// keeps ParameterStatus, drops notices, and turns a failure or a close into the inbox's error.
/// When the server agrees to TLS, puts TLS in front of everything at once, in the same read: no
/// byte after the server's 'S' is ever taken as plaintext (CVE-2021-23222).
final class PostgresHandler: ChannelInboundHandler {
    typealias InboundIn = BackendMessage

    let inbox: Inbox
    let listeners: Listeners
    let parameters: ServerParameters
    let tls: (context: NIOSSLContext, serverName: String?)?

    init(
        inbox: Inbox, listeners: Listeners, parameters: ServerParameters,
        tls: (context: NIOSSLContext, serverName: String?)? = nil
    ) {
        self.inbox = inbox
        self.listeners = listeners
        self.parameters = parameters
        self.tls = tls
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let message = unwrapInboundIn(data)
        switch message {
        case .notification(let notification): listeners.deliver(notification)
        case .parameterStatus(let name, let value):
            if !parameters.set(name, value) {
                errorCaught(context: context, error: PostgresError(.protocolViolation, "the server sent more than \(ServerParameters.limit) ParameterStatus names"))
            }
        // Warnings about statements tokend chose; nothing to act on.
        case .notice: break
        case .sslResponse(true):
            guard let tls else {
                return errorCaught(context: context, error: PostgresError(.protocolViolation, "an answer to an SSLRequest not sent"))
            }
            do {
                let handler = try NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName)
                try context.pipeline.syncOperations.addHandler(handler, position: .first)
            } catch {
                return errorCaught(context: context, error: error)
            }
            deliver(message, context: context)
        default: deliver(message, context: context)
        }
    }

    private func deliver(_ message: BackendMessage, context: ChannelHandlerContext) {
        if let refusal = inbox.deliver(message) { errorCaught(context: context, error: refusal) }
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
