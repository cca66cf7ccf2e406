import NIOCore
import NIOHTTP1

/// An upstream's response head (RFC 9112 §4), as the proxy needs it:
/// HTTPHead's reading of it, with the bytes it was read from.
struct ResponseHead {
    let fields: HeadFields
    let status: Int
    let version: HTTPVersion
    /// The reason phrase's place in the head's bytes.
    let reason: Range<Int>
    /// How its body is framed; `.length(0)` when it has none (RFC 9112 §6.3).
    let framing: BodyFraming
    /// The upstream keeps the connection open after this answer.
    let keepAlive: Bool

    var bytes: ByteBuffer { fields.bytes }

    func values(_ kind: FieldKind) -> [String] { fields.values(kind) }

    /// A whole head; `toHead` says the request was HEAD, whose answer has no body whatever it says.
    init(_ bytes: ByteBuffer, toHead: Bool) throws(WireError) {
        self = try bytes.withUnsafeReadableBytes { p in Result { () throws(WireError) in try Self(bytes, p, toHead: toHead) } }.get()
    }

    private init(_ bytes: ByteBuffer, _ p: UnsafeRawBufferPointer, toHead: Bool) throws(WireError) {
        let syntax: ResponseHeadSyntax
        do {
            syntax = try ResponseHeadSyntax(p, toHead: toHead, limits: Wire.limits)
        } catch {
            throw ResponseDecoder.upstreams(error)
        }
        status = syntax.status
        version = syntax.minorVersion == 0 ? .http1_0 : .http1_1
        reason = syntax.reason
        framing = syntax.framing
        keepAlive = syntax.keepAlive
        fields = HeadFields(bytes: bytes, section: (consume syntax).fields)
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

    /// What cannot be read of an answer is the upstream's fault (502), and the message says whose.
    static func upstreams(_ error: HeadError) -> WireError {
        WireError(status: .badGateway, message: "the upstream's answer: \(error.message)")
    }

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
