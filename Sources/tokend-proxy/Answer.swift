import NIOCore
import NIOHTTP1
import TokendClient

/// An answer the proxy gives itself, with a plain-text body that says why.
struct Answer: Sendable {
    let status: HTTPResponseStatus
    let message: String
    /// Seconds after which the client may try again (a 503 while tokend bounds proofs).
    var retryAfter: Int? = nil

    static let forbidden = Answer(
        status: .forbidden, message: "tokend-proxy serves only the user it runs as; run your own proxy as yourself")

    static func badRequest(_ why: String) -> Answer { Answer(status: .badRequest, message: why) }

    /// tokend said no, or is not there.
    static func tokendFailed(_ error: any Error) -> Answer {
        if error is TokendTimedOut { return Answer(status: .gatewayTimeout, message: "\(error)") }
        switch error as? TokendClientError {
        case .permissionDenied?: return Answer(status: .forbidden, message: "tokend: \(error)")
        default: return Answer(status: .serviceUnavailable, message: "tokend: \(error)")
        }
    }

    /// The answer's bytes; with `close`, the connection ends after it, and the answer says so.
    func bytes(version: HTTPVersion, close: Bool = false) -> ByteBuffer {
        let body = "tokend-proxy: \(message)\n"
        let text =
            "HTTP/1.\(version.minor == 0 ? 0 : 1) \(status.code) \(status.reasonPhrase)\r\n\(close ? "Connection: close\r\n" : "")"
            + (retryAfter.map { "Retry-After: \($0)\r\n" } ?? "")
            + "Content-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        return ByteBuffer(string: text)
    }
}
