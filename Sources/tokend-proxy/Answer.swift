import AsyncHTTPClient
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

    /// With `close`, the connection ends after this answer, and the answer says so.
    func write(
        to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>, version: HTTPVersion, close: Bool = false
    ) async throws {
        let body = ByteBuffer(string: "tokend-proxy: \(message)\n")
        var headers = HTTPHeaders()
        if close { headers.add(name: "Connection", value: "close") }
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        try await outbound.write(.head(HTTPResponseHead(version: version, status: status, headers: headers)))
        try await outbound.write(.body(.byteBuffer(body)))
        try await outbound.write(.end(nil))
    }

    /// The answer, then the connection closed, when no request is in flight (none came in time, or the
    /// connection is over the cap): NIO's HTTP pipeline pairs every response with a request, so these
    /// bytes go straight to the socket, under the HTTP encoder.
    func writeAndClose(on channel: Channel) async {
        let body = "tokend-proxy: \(message)\n"
        let text =
            "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\nConnection: close\r\n"
            + "Content-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        let written = channel.eventLoop.flatSubmit {
            do {
                let encoder = try channel.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self)
                return encoder.writeAndFlush(NIOAny(ByteBuffer(string: text)))
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }
        try? await written.get()
        try? await channel.close()
    }
}

/// Why the upstream gave no answer, as the status the client gets: 504 when
/// it did not answer in time, 502 otherwise (refused, TLS, reset).
struct UpstreamFailure: Error {
    let answer: Answer
    let reason: String

    init(_ error: any Error, timeout: Duration) {
        let text = String(describing: error)
        if let error = error as? HTTPClientError, error == .deadlineExceeded || error == .readTimeout {
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
