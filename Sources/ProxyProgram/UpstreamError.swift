import NIOCore
import NIOSSL

#if canImport(Glibc)
import Glibc
#endif

/// Why the upstream gave no answer (or stopped in the middle of one): what
/// happened, by kind, so that the client's status is chosen by kind and never
/// by the words of a message.
struct UpstreamError: Error, CustomStringConvertible {
    enum Kind: Equatable {
        /// The upstream's name has no address.
        case unresolved
        /// No address accepted a connection.
        case refused
        /// No connection within --timeout (the look-up included).
        case connectTimedOut
        /// The upstream took no byte of the request for --timeout.
        case sendTimedOut
        /// The upstream did not start its answer, or fell silent in it, for --timeout.
        case answerTimedOut
        /// TLS failed: the handshake, the certificate, or a record.
        case tls
        /// The upstream closed the connection before its answer was whole.
        case closed
        /// The upstream's answer cannot be read.
        case malformed
        /// Another socket error.
        case socket
    }

    let kind: Kind
    /// What happened, for the log (never a secret: no header value is in it).
    let detail: String
    /// The client's status for a malformed answer (from the reader).
    private let wire: WireError?

    init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
        wire = nil
    }

    /// `error`, as what the proxy's parts raise: sorted by its type.
    init(_ error: any Error) {
        switch error {
        case let known as UpstreamError:
            self = known
        case let malformed as WireError:
            kind = .malformed
            detail = malformed.message
            wire = malformed
        case let socket as SocketError:
            kind = socket.code == ECONNREFUSED ? .refused : socket.code == ETIMEDOUT && socket.operation == "connect" ? .connectTimedOut : .socket
            detail = socket.description
            wire = nil
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            kind = .tls
            detail = String(describing: error)
            wire = nil
        default:
            kind = .socket
            detail = String(describing: error)
            wire = nil
        }
    }

    var description: String { detail }

    /// The answer the client gets: 504 when time ran out, 502 otherwise.
    func answer(timeout: Duration) -> Answer {
        let seconds = timeout.components.seconds
        return switch kind {
        case .malformed: Answer(status: wire?.status ?? .badGateway, message: wire?.message ?? detail)
        case .answerTimedOut: Answer(status: .gatewayTimeout, message: "the upstream did not answer within \(seconds) s")
        case .connectTimedOut: Answer(status: .gatewayTimeout, message: "the upstream did not accept a connection within \(seconds) s")
        case .sendTimedOut: Answer(status: .gatewayTimeout, message: "the upstream took none of the request for \(seconds) s")
        case .unresolved: Answer(status: .badGateway, message: detail)
        case .refused: Answer(status: .badGateway, message: "the upstream refused the connection")
        case .tls: Answer(status: .badGateway, message: "TLS with the upstream failed: \(detail.prefix(200))")
        case .closed, .socket: Answer(status: .badGateway, message: "the upstream failed: \(detail.prefix(200))")
        }
    }

    static func unresolved(_ host: String) -> UpstreamError { UpstreamError(.unresolved, "the upstream's name \(host) has no address") }
    static let closed = UpstreamError(.closed, "the upstream closed the connection")
    static let answerTimedOut = UpstreamError(.answerTimedOut, "the upstream did not answer in time")
    static let streamIdle = UpstreamError(.answerTimedOut, "the event stream stayed silent for --stream-idle-timeout")
    static let sendTimedOut = UpstreamError(.sendTimedOut, "the upstream stopped taking the request")
    static let connectTimedOut = UpstreamError(.connectTimedOut, "connecting to the upstream timed out")
}
