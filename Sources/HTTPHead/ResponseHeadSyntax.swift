/// How a message's body ends.
public enum BodyFraming: Sendable {
    case length(Int)
    case chunked
    case untilClose
}

/// An answer's head (RFC 9112 §4), read with the requests' tokenizer and as
/// strictly; what a proxy reads of its upstream.
public struct ResponseHeadSyntax: Sendable {
    public let fields: HeaderSection
    public let status: Int
    /// 0 or 1: HTTP/1.0 or HTTP/1.1.
    public let minorVersion: Int
    /// The reason phrase's place in the head's bytes.
    public let reason: Range<Int>
    /// How its body is framed; `.length(0)` when it has none (RFC 9112 §6.3).
    public let framing: BodyFraming
    /// The sender keeps the connection open after this answer.
    public let keepAlive: Bool

    /// `p` is a whole head; `toHead` says the request was HEAD, whose answer has no body whatever it says.
    /// Its errors have the status a request's would; a relay answers its own client 502 whatever they say.
    public init(_ p: UnsafeRawBufferPointer, toHead: Bool, limits: HeadLimits) throws(HeadError) {
        try RequestHeadSyntax.checkWhole(p, limits: limits)
        // HTTP-version SP status-code SP [ reason-phrase ] CRLF
        var at = 0
        do {
            minorVersion = try RequestHeadSyntax.version(p, at: &at)
        } catch {
            throw .bad("its status line does not start with HTTP/1.0 or HTTP/1.1")
        }
        guard p[at] == 0x20, p.count - at > 4, p[at + 1...at + 3].allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw .bad("its status line has no status code")
        }
        status = p[at + 1...at + 3].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        at += 4
        var reasonStart = at
        if p[at] == 0x20 {
            reasonStart += 1
            at += 1
            while p[at] != 0x0D {
                guard HeadSyntax.isValueByte(p[at]) else { throw .bad("its reason phrase has a control character") }
                at += 1
            }
        }
        guard p[at] == 0x0D, p[at + 1] == 0x0A, status >= 100 else { throw .bad("its status line is malformed") }
        reason = reasonStart..<at
        fields = try HeaderSection(p, startLine: 0..<at + 2, limits: limits)
        let given = try fields.framing(p)
        if toHead || status < 200 || status == 204 || status == 304 {
            framing = .length(0)
        } else if given.chunked {
            framing = .chunked
        } else if let length = given.length {
            framing = .length(length)
        } else {
            framing = .untilClose
        }
        let untilClose = if case .untilClose = framing { true } else { false }
        keepAlive = !untilClose && fields.persists(minor: minorVersion)
    }
}
