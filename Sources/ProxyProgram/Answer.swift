import NIOCore
import NIOHTTP1
import TokendClient
import Varlink

/// An answer the proxy gives itself, with a body that says why: plain text, or for a client that speaks
/// MCP a JSON-RPC error (with no id, as the transport allows for an HTTP error) that its user is shown.
/// No body carries a token or a challenge of the upstream's.
struct Answer: Sendable {
    let status: HTTPResponseStatus
    let message: String
    /// Seconds after which the client may try again (a 503 while tokend bounds proofs).
    var retryAfter: Int? = nil

    static let forbidden = Answer(
        status: .forbidden, message: "tokend-proxy serves only the user it runs as; run your own proxy as yourself")

    static func badRequest(_ why: String) -> Answer { Answer(status: .badRequest, message: why) }

    /// The session needs a login (tokend said so when asked for a token, or when a refresh after the
    /// upstream's 401 was refused): the person logs in, not the client. 503, not 401: a 401 (and the
    /// upstream's challenge, which the proxy never passes) would send an MCP client into an OAuth flow of
    /// its own.
    static func loginRequired(session: String, reason: String) -> Answer {
        let command = session == "default" ? "tokenctl login --browser" : "tokenctl login --session \(session) --browser"
        return Answer(
            status: .serviceUnavailable,
            message: "session \(session) needs a login (\(reason)): log in with `\(command)` (or --device), then try again")
    }

    /// tokend said no, or is not there.
    static func tokendFailed(_ error: any Error) -> Answer {
        if error is TokendTimedOut { return Answer(status: .gatewayTimeout, message: "\(error)") }
        switch error as? TokendClientError {
        case .loginRequired(let session, let reason)?: return loginRequired(session: session, reason: reason)
        case .permissionDenied?: return Answer(status: .forbidden, message: "tokend: \(error)")
        default: return Answer(status: .serviceUnavailable, message: "tokend: \(error)")
        }
    }

    /// JSON-RPC's code for an error of the server's own (-32000 to -32099 are the implementation's).
    static let jsonRPCCode = -32000

    /// The answer's bytes; with `close`, the connection ends after it, and the answer says so. With
    /// `jsonRPC`, the body is a JSON-RPC error whose message is the plain text's.
    func bytes(version: HTTPVersion, close: Bool = false, jsonRPC: Bool = false) -> ByteBuffer {
        let body: String
        let type: String
        if jsonRPC {
            type = "application/json"
            body = Self.jsonRPCError(message: "tokend-proxy: \(message)", status: Int(status.code)) + "\n"
        } else {
            type = "text/plain; charset=utf-8"
            body = "tokend-proxy: \(message)\n"
        }
        let text =
            "HTTP/1.\(version.minor == 0 ? 0 : 1) \(status.code) \(status.reasonPhrase)\r\n\(close ? "Connection: close\r\n" : "")"
            + (retryAfter.map { "Retry-After: \($0)\r\n" } ?? "")
            + "Content-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        return ByteBuffer(string: text)
    }

    /// `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":…,"data":{"status":…}}}`.
    static func jsonRPCError(message: String, status: Int) -> String {
        let error: JSONObject = ["code": .int(jsonRPCCode), "message": .string(message), "data": .object(["status": .int(status)])]
        return JSONWriter.string(.object(["jsonrpc": .string("2.0"), "id": .null, "error": .object(error)]))
    }
}
