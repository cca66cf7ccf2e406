import NIOCore
import NIOHTTP1
import NIOSSL
import TokendClient

/// An answer the proxy gives itself, with a plain-text body that says why.
struct Answer {
    let status: HTTPResponseStatus
    let message: String

    static let forbidden = Answer(
        status: .forbidden, message: "tokend-proxy serves only the user it runs as; run your own proxy as yourself")

    static func badRequest(_ why: String) -> Answer { Answer(status: .badRequest, message: why) }

    /// tokend said no, or is not there.
    static func tokendFailed(_ error: any Error) -> Answer {
        switch error as? TokendClientError {
        case .permissionDenied?: Answer(status: .forbidden, message: "tokend: \(error)")
        default: Answer(status: .serviceUnavailable, message: "tokend: \(error)")
        }
    }

    /// The answer as response parts; with `close`, the connection ends after it, and the answer says so.
    func parts(version: HTTPVersion, close: Bool = false) -> (head: HTTPResponseHead, body: ByteBuffer) {
        let body = ByteBuffer(string: "tokend-proxy: \(message)\n")
        var headers = HTTPHeaders()
        if close { headers.add(name: "Connection", value: "close") }
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        return (HTTPResponseHead(version: version, status: status, headers: headers), body)
    }

    /// The answer, then the connection closed, when no request is in flight (none came in time, or the
    /// connection is over the cap): NIO's HTTP pipeline pairs every response with a request, so these
    /// bytes go straight to the socket, under the HTTP encoder. On the channel's event loop.
    func writeAndClose(on channel: Channel) {
        let body = "tokend-proxy: \(message)\n"
        let text =
            "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\nConnection: close\r\n"
            + "Content-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        guard let encoder = try? channel.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self) else {
            channel.close(promise: nil)
            return
        }
        encoder.writeAndFlush(NIOAny(ByteBuffer(string: text))).assumeIsolated().whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// Why the upstream gave no answer, as the status the client gets: 504 when
/// it did not answer in time, 502 otherwise (refused, TLS, reset).
struct UpstreamFailure: Error {
    let answer: Answer
    let reason: String

    init(_ error: any Error, timeout: Duration) {
        let text = String(describing: error)
        if error is UpstreamTimedOut {
            answer = Answer(status: .gatewayTimeout, message: "the upstream did not answer within \(timeout.components.seconds) s")
        } else if error is NIOSSLError || text.contains("SSL") || text.contains("TLS") || text.contains("certificate") {
            answer = Answer(status: .badGateway, message: "TLS with the upstream failed: \(text.prefix(200))")
        } else if text.contains("refused") || text.contains("ECONNREFUSED") {
            answer = Answer(status: .badGateway, message: "the upstream refused the connection")
        } else {
            answer = Answer(status: .badGateway, message: "the upstream failed: \(text.prefix(200))")
        }
        reason = text
    }
}
