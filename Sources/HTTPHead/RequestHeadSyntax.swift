#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A request's method, as far as a reader tells them apart.
public enum RequestMethod: Sendable {
    case get, head, post, put, patch, delete, options, trace, other

    /// RFC 9110 §9.2.2: sending it twice has the effect of sending it once, so a request that got no
    /// answer may be sent again (GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
    public var isIdempotent: Bool {
        switch self {
        case .get, .head, .options, .trace, .put, .delete: true
        case .post, .patch, .other: false
        }
    }

    /// Methods are case-sensitive (RFC 9110 §9.1).
    static func of(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) -> RequestMethod {
        func named(_ name: StaticString) -> Bool {
            name.utf8CodeUnitCount == range.count && memcmp(p.baseAddress! + range.lowerBound, name.utf8Start, range.count) == 0
        }
        if named("GET") { return .get }
        if named("POST") { return .post }
        if named("PUT") { return .put }
        if named("HEAD") { return .head }
        if named("PATCH") { return .patch }
        if named("DELETE") { return .delete }
        if named("OPTIONS") { return .options }
        if named("TRACE") { return .trace }
        return .other
    }
}

/// A request head (RFC 9112 §3) read strictly, as places in its bytes: the
/// one reader of every HTTP/1 listener in the project. Where leniency lets
/// two parsers disagree on where a message ends, it refuses: a LF without its
/// CR, a folded line, a space before a colon, both Content-Length and
/// Transfer-Encoding, lengths that differ, a transfer coding other than
/// chunked, Transfer-Encoding in HTTP/1.0.
public struct RequestHeadSyntax: Sendable {
    public let fields: HeaderSection
    public let method: RequestMethod
    /// Where the method is in the head's bytes.
    public let methodBytes: Range<Int>
    /// Where the request target is.
    public let target: Range<Int>
    /// 0 or 1: HTTP/1.0 or HTTP/1.1.
    public let minorVersion: Int
    /// The body's length, when the client gave one.
    public let contentLength: Int?
    public let chunked: Bool
    /// The connection stays open after the answer (RFC 9112 §9.3).
    public let keepAlive: Bool
    /// `Expect: 100-continue`: the client waits for a 100 before its body.
    public let expectsContinue: Bool

    /// `p` is a whole head, from its request line through its empty line (what `HeadScanner` found).
    public init(_ p: UnsafeRawBufferPointer, limits: HeadLimits) throws(HeadError) {
        try Self.checkWhole(p, limits: limits)
        // method SP request-target SP HTTP-version CRLF
        var at = 0
        while HeadSyntax.isTokenByte(p[at]) { at += 1 }
        let methodEnd = at
        guard methodEnd > 0, p[at] == 0x20 else { throw .bad("the request line does not start with a method and a space") }
        at += 1
        let targetStart = at
        while p[at] > 0x20 && p[at] < 0x7F { at += 1 }
        guard at > targetStart, p[at] == 0x20 else { throw .bad("the request target is missing or has a character it may not have") }
        target = targetStart..<at
        at += 1
        minorVersion = try Self.version(p, at: &at)
        guard p[at] == 0x0D, p[at + 1] == 0x0A else { throw .bad("the request line has more after its HTTP version") }
        guard at + 2 <= limits.line else { throw HeadError(status: 414, message: "the request line is longer than \(limits.line) bytes") }
        fields = try HeaderSection(p, startLine: 0..<at + 2, limits: limits)
        let framing = try fields.framing(p)
        if framing.chunked && minorVersion == 0 { throw .bad("HTTP/1.0 has no Transfer-Encoding") }
        contentLength = framing.length
        chunked = framing.chunked
        method = .of(p, 0..<methodEnd)
        methodBytes = 0..<methodEnd
        keepAlive = fields.persists(minor: minorVersion)
        expectsContinue = minorVersion == 1 && fields.list.contains { $0.kind == .expect && HeadSyntax.equalsLowercase(p, $0.value, "100-continue") }
    }

    /// A whole head ends in CRLF CRLF (its start line's and the empty line): the parsers read up to it
    /// without checking each index. It is within the head's limit (HeadScanner's, checked again).
    static func checkWhole(_ p: UnsafeRawBufferPointer, limits: HeadLimits) throws(HeadError) {
        guard p.count >= 4, p[p.count - 4] == 0x0D, p[p.count - 3] == 0x0A, p[p.count - 2] == 0x0D, p[p.count - 1] == 0x0A else {
            throw .bad("the head does not end with an empty line")
        }
        guard p.count <= limits.bytes else { throw HeadError(status: 431, message: "the head is longer than \(limits.bytes) bytes") }
    }

    /// "HTTP/1.0" or "HTTP/1.1" at `at`, as its minor version; another version is refused with 505.
    static func version(_ p: UnsafeRawBufferPointer, at: inout Int) throws(HeadError) -> Int {
        guard p.count - at >= 8, memcmp(p.baseAddress! + at, "HTTP/", 5) == 0, p[at + 6] == UInt8(ascii: ".") else {
            throw .bad("the HTTP version is malformed")
        }
        let major = p[at + 5]
        let minor = p[at + 7]
        guard (0x30...0x39).contains(major), (0x30...0x39).contains(minor) else { throw .bad("the HTTP version is malformed") }
        guard major == UInt8(ascii: "1"), minor <= UInt8(ascii: "1") else {
            throw HeadError(status: 505, message: "only HTTP/1.0 and HTTP/1.1 are spoken here")
        }
        at += 8
        return Int(minor - 0x30)
    }
}
