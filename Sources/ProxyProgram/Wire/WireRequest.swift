import NIOCore
import NIOHTTP1

/// A client's request head (RFC 9112 §3), as the proxy needs it: HTTPHead's
/// reading of it, with the bytes it was read from.
struct RequestHead {
    typealias Method = RequestMethod

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
        self = try bytes.withUnsafeReadableBytes { p in Result { () throws(WireError) in try Self(bytes, p) } }.get()
    }

    /// Read where it lies: the syntax's parts are taken, not copied (a copy is a retain per reference in it).
    private init(_ bytes: ByteBuffer, _ p: UnsafeRawBufferPointer) throws(WireError) {
        let syntax: RequestHeadSyntax
        do {
            syntax = try RequestHeadSyntax(p, limits: Wire.limits)
        } catch {
            throw WireError(error)
        }
        method = syntax.method
        methodBytes = syntax.methodBytes
        target = HeadSyntax.string(p, syntax.target)
        version = syntax.minorVersion == 0 ? .http1_0 : .http1_1
        contentLength = syntax.contentLength
        chunked = syntax.chunked
        keepAlive = syntax.keepAlive
        expectsContinue = syntax.expectsContinue
        fields = HeadFields(bytes: bytes, section: (consume syntax).fields)
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
