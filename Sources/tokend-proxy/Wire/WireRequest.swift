import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

/// A client's request head (RFC 9112 §3), as the proxy needs it.
struct RequestHead {
    enum Method {
        case get, head, post, put, patch, delete, options, trace, other

        /// RFC 9110 §9.2.2: sending it twice has the effect of sending it once, so a request that got no
        /// answer may be sent again (GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
        var isIdempotent: Bool {
            switch self {
            case .get, .head, .options, .trace, .put, .delete: true
            case .post, .patch, .other: false
            }
        }
    }

    let fields: HeadFields
    let method: Method
    /// Where the method is in the head's bytes.
    let methodBytes: Range<Int>
    let target: String
    /// HTTP/1.0 or HTTP/1.1.
    let version: HTTPVersion
    /// The body's length, when the client gave one.
    let contentLength: Int?
    let chunked: Bool
    /// The connection stays open after the answer (RFC 9112 §9.3).
    let keepAlive: Bool
    /// `Expect: 100-continue`: the client waits for a 100 before its body.
    let expectsContinue: Bool

    var bytes: ByteBuffer { fields.bytes }

    func values(_ kind: FieldKind) -> [String] { fields.values(kind) }

    /// A whole head, from its start line through its empty line.
    init(_ bytes: ByteBuffer) throws(WireError) {
        self = try bytes.withUnsafeReadableBytes { p in Result { () throws(WireError) in try Self.parse(bytes, p) } }.get()
    }

    private init(
        fields: HeadFields, method: Method, methodBytes: Range<Int>, target: String, version: HTTPVersion, contentLength: Int?,
        chunked: Bool, expectsContinue: Bool
    ) {
        self.fields = fields
        self.method = method
        self.methodBytes = methodBytes
        self.target = target
        self.version = version
        self.contentLength = contentLength
        self.chunked = chunked
        self.expectsContinue = expectsContinue
        keepAlive = version.minor == 1 ? !fields.close : fields.keepAlive && !fields.close
    }

    private static func parse(_ bytes: ByteBuffer, _ p: UnsafeRawBufferPointer) throws(WireError) -> RequestHead {
        // method SP request-target SP HTTP-version CRLF
        var at = 0
        while Wire.isTokenByte(p[at]) { at += 1 }
        let methodEnd = at
        guard methodEnd > 0, p[at] == 0x20 else { throw .bad("the request line does not start with a method and a space") }
        at += 1
        let targetStart = at
        while p[at] > 0x20 && p[at] < 0x7F { at += 1 }
        guard at > targetStart, p[at] == 0x20 else { throw .bad("the request target is missing or has a character it may not have") }
        let target = String(decoding: p[targetStart..<at], as: UTF8.self)
        at += 1
        let version = try Wire.version(p, at: &at)
        guard p[at] == 0x0D, p[at + 1] == 0x0A else { throw .bad("the request line has more after its HTTP version") }
        let list = try Wire.fields(p, from: at + 2)
        let fields = HeadFields(bytes: bytes, startLine: 0..<at + 2, list: list, p)
        let framing = try Wire.framing(fields, p, request: true)
        if framing.chunked && version.minor == 0 { throw .bad("HTTP/1.0 has no Transfer-Encoding") }
        let expectsContinue = version.minor == 1 && fields.has(.expect) && fields.values(.expect).contains { $0.lowercased() == "100-continue" }
        return RequestHead(
            fields: fields, method: method(p, 0..<methodEnd), methodBytes: 0..<methodEnd, target: target, version: version,
            contentLength: framing.length, chunked: framing.chunked, expectsContinue: expectsContinue)
    }

    /// Methods are case-sensitive (RFC 9110 §9.1).
    private static func method(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) -> Method {
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

extension Wire {
    /// "HTTP/1.0" or "HTTP/1.1" at `at`; another version is refused with 505.
    static func version(_ p: UnsafeRawBufferPointer, at: inout Int) throws(WireError) -> HTTPVersion {
        guard p.count - at >= 8, memcmp(p.baseAddress! + at, "HTTP/", 5) == 0, p[at + 6] == UInt8(ascii: ".") else {
            throw .bad("the HTTP version is malformed")
        }
        let major = p[at + 5]
        let minor = p[at + 7]
        guard (0x30...0x39).contains(major), (0x30...0x39).contains(minor) else { throw .bad("the HTTP version is malformed") }
        guard major == UInt8(ascii: "1"), minor <= UInt8(ascii: "1") else {
            throw WireError(status: .httpVersionNotSupported, message: "only HTTP/1.0 and HTTP/1.1 are spoken here")
        }
        at += 8
        return HTTPVersion(major: 1, minor: Int(minor - 0x30))
    }

    /// Content-Length and Transfer-Encoding (RFC 9112 §6): one length, however often it is given, or
    /// chunked alone; both at once is how requests are smuggled past a proxy, and is refused.
    static func framing(_ fields: HeadFields, _ p: UnsafeRawBufferPointer, request: Bool) throws(WireError)
        -> (length: Int?, chunked: Bool)
    {
        var length: Int?
        var chunked = false
        let refused = { (message: String) in
            request ? WireError.bad(message) : WireError(status: .badGateway, message: "the upstream's answer: \(message)")
        }
        for field in fields.list {
            switch field.kind {
            case .contentLength:
                // 1*DIGIT, or a list of the same one ("5, 5"), as some senders join repeated fields.
                var at = field.value.lowerBound
                while true {
                    while at < field.value.upperBound, p[at] == 0x20 || p[at] == 0x09 { at += 1 }
                    var value = 0
                    var digits = 0
                    while at < field.value.upperBound, p[at] >= 0x30 && p[at] <= 0x39 {
                        guard digits < 18 else { throw refused("Content-Length is too large") }
                        value = value * 10 + Int(p[at] - 0x30)
                        digits += 1
                        at += 1
                    }
                    while at < field.value.upperBound, p[at] == 0x20 || p[at] == 0x09 { at += 1 }
                    guard digits > 0, at == field.value.upperBound || p[at] == UInt8(ascii: ",") else {
                        throw refused("Content-Length is not a number")
                    }
                    guard length == nil || length == value else { throw refused("Content-Length is given twice, differently") }
                    length = value
                    if at == field.value.upperBound { break }
                    at += 1
                }
            case .transferEncoding:
                guard !chunked, Wire.equalsLowercase(p, field.value, "chunked") else {
                    throw WireError(
                        status: request ? .notImplemented : .badGateway,
                        message: request
                            ? "a Transfer-Encoding other than chunked is not supported"
                            : "the upstream's answer has a Transfer-Encoding other than chunked")
                }
                chunked = true
            default:
                continue
            }
        }
        if chunked && length != nil { throw refused("both Content-Length and Transfer-Encoding are given") }
        return (length, chunked)
    }
}

/// A part of a client's request.
enum RequestPart {
    case head(RequestHead)
    case body(ByteBuffer)
    case end
}

/// The client's bytes as requests, one after another on the connection.
struct RequestDecoder {
    private var reader = MessageReader()

    /// Bytes read and not yet given out as parts.
    var hasBytes: Bool { reader.hasBytes }
    /// The memory the bytes kept take.
    var capacity: Int { reader.capacity }

    mutating func append(_ bytes: ByteBuffer) { reader.append(bytes) }

    /// The next part, or nil while more bytes are needed.
    mutating func next() throws(WireError) -> RequestPart? {
        if reader.body != nil {
            switch try reader.bodyPiece() {
            case .data(let data)?: return .body(data)
            case .end?: return .end
            case nil: return nil
            }
        }
        reader.skipEmptyLines()
        guard let bytes = try reader.head() else { return nil }
        let head = try RequestHead(bytes)
        reader.body = BodyReader(head.chunked ? .chunked : .length(head.contentLength ?? 0))
        return .head(head)
    }
}
