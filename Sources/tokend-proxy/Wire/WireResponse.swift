import NIOCore
import NIOHTTP1

/// An upstream's response head (RFC 9112 §4), as the proxy needs it.
struct ResponseHead {
    let fields: HeadFields
    let status: Int
    let version: HTTPVersion
    /// The reason phrase's place in the head's bytes.
    let reason: Range<Int>
    /// How its body is framed; `.length(0)` when it has none (RFC 9112 §6.3).
    let framing: BodyReader.Framing
    /// The upstream keeps the connection open after this answer.
    let keepAlive: Bool

    var bytes: ByteBuffer { fields.bytes }

    func values(_ kind: FieldKind) -> [String] { fields.values(kind) }

    /// A whole head; `toHead` says the request was HEAD, whose answer has no body whatever it says.
    init(_ bytes: ByteBuffer, toHead: Bool) throws(WireError) {
        self = try bytes.withUnsafeReadableBytes { p in Result { () throws(WireError) in try Self.parse(bytes, p, toHead: toHead) } }.get()
    }

    private init(fields: HeadFields, status: Int, version: HTTPVersion, reason: Range<Int>, framing: BodyReader.Framing, keepAlive: Bool) {
        self.fields = fields
        self.status = status
        self.version = version
        self.reason = reason
        self.framing = framing
        self.keepAlive = keepAlive
    }

    private static func parse(_ bytes: ByteBuffer, _ p: UnsafeRawBufferPointer, toHead: Bool) throws(WireError) -> ResponseHead {
        let refused = { (message: String) in WireError(status: .badGateway, message: "the upstream's answer: \(message)") }
        // HTTP-version SP status-code SP [ reason-phrase ] CRLF
        var at = 0
        let version: HTTPVersion
        do {
            version = try Wire.version(p, at: &at)
        } catch {
            throw refused("its status line does not start with HTTP/1.0 or HTTP/1.1")
        }
        guard p[at] == 0x20, p.count - at > 4, p[at + 1...at + 3].allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw refused("its status line has no status code")
        }
        let status = p[at + 1...at + 3].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        at += 4
        var reasonStart = at
        if p[at] == 0x20 {
            reasonStart += 1
            at += 1
            while p[at] != 0x0D {
                guard Wire.isValueByte(p[at]) else { throw refused("its reason phrase has a control character") }
                at += 1
            }
        }
        guard p[at] == 0x0D, p[at + 1] == 0x0A, status >= 100 else { throw refused("its status line is malformed") }
        let list: [Field]
        do {
            list = try Wire.fields(p, from: at + 2)
        } catch {
            throw refused(error.message)
        }
        let fields = HeadFields(bytes: bytes, startLine: 0..<at + 2, list: list, p)
        let given = try Wire.framing(fields, p, request: false)
        let framing: BodyReader.Framing
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
        let keepAlive = !untilClose && (version.minor == 1 ? !fields.close : fields.keepAlive && !fields.close)
        return ResponseHead(
            fields: fields, status: status, version: version, reason: reasonStart..<at, framing: framing, keepAlive: keepAlive)
    }
}

/// A part of an upstream's answer.
enum ResponsePart {
    case head(ResponseHead)
    case body(ByteBuffer)
    case end
}

/// An upstream connection's bytes as answers, one per request sent.
struct ResponseDecoder {
    private var reader = MessageReader()
    /// The request being answered was HEAD.
    var toHead = false

    /// Bytes read and not yet given out as parts: after an answer's end, bytes no request asked for.
    var hasBytes: Bool { reader.hasBytes }

    mutating func append(_ bytes: ByteBuffer) { reader.append(bytes) }

    /// The next part, or nil while more bytes are needed; what cannot be read is the upstream's fault (502).
    mutating func next() throws(WireError) -> ResponsePart? {
        do {
            return try part()
        } catch where error.status == .badGateway {
            throw error
        } catch {
            throw WireError(status: .badGateway, message: "the upstream's answer: \(error.message)")
        }
    }

    private mutating func part() throws(WireError) -> ResponsePart? {
        if reader.body != nil {
            switch try reader.bodyPiece() {
            case .data(let data)?: return .body(data)
            case .end?: return .end
            case nil: return nil
            }
        }
        while let bytes = try reader.head() {
            let head = try ResponseHead(bytes, toHead: toHead)
            // An interim answer (103 Early Hints, a 100 not asked for) is dropped: the final one follows.
            if head.status < 200 {
                guard head.status != 101 else { throw WireError(status: .badGateway, message: "the upstream switched protocols, which the proxy does not ask for") }
                continue
            }
            reader.body = BodyReader(head.framing)
            return .head(head)
        }
        return nil
    }

    /// The upstream closed the connection: the end of a body read until then, else nil (the answer is cut).
    mutating func closed() -> ResponsePart? {
        guard let body = reader.body, body.endsWithConnection else { return nil }
        reader.body = nil
        return .end
    }
}
