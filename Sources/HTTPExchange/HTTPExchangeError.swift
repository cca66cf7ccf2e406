/// Why an exchange brought back no response. A struct around a private code,
/// so cases can be added; a description names the server and the cause, never
/// a header value or the body that was sent.
public struct HTTPExchangeError: Error, CustomStringConvertible, Sendable, Equatable {
    enum Code: Sendable, Equatable {
        case invalidURL, notConnected, deadlineExceeded, tooManyBytes, tls, malformedResponse, closedEarly, io, cancelled
    }

    let code: Code
    public let description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// No connection was made, so nothing of the request reached anyone:
    /// another address may be tried.
    public var connectionNotMade: Bool { code == .notConnected }
    public var isDeadlineExceeded: Bool { code == .deadlineExceeded }
    /// The body was longer than the exchange's limit.
    public var isTooManyBytes: Bool { code == .tooManyBytes }
    /// The TLS handshake failed: most often the certificate was not accepted.
    public var isTLSFailure: Bool { code == .tls }
    /// The answer was not HTTP/1.x.
    public var isMalformedResponse: Bool { code == .malformedResponse }
    public var isCancelled: Bool { code == .cancelled }

    static func invalidURL(_ why: String) -> Self { Self(.invalidURL, "the URL cannot be requested: \(why)") }
    static let deadlineExceeded = Self(.deadlineExceeded, "no complete answer before the deadline")
    static let cancelled = Self(.cancelled, "the request was cancelled")
    static func tooManyBytes(_ limit: Int) -> Self { Self(.tooManyBytes, "the answer is longer than \(limit) bytes") }
}
