@_exported import HTTPHead
import NIOCore
import NIOHTTP1

/// HTTP/1.1 (RFC 9112) as the proxy reads and writes it: heads are read in
/// place by the project's one head reader (HTTPHead), their header lines kept
/// as byte ranges and copied through whole, bodies passed on as slices of the
/// bytes that came. NIO's HTTP/1 codecs turned every message into header
/// strings and back twice per request (client, upstream, upstream, client):
/// the largest cost left in the proxy (bench/README.md).
enum Wire {
    /// The longest head read (start line and header fields), and any one line of it.
    static let maximumHead = 64 * 1024
    /// The most header lines a head may have: what a field costs to note is bounded per head.
    static let maximumFields = 256
    /// What the proxy reads of a head, of clients and upstreams alike.
    static let limits = HeadLimits(bytes: maximumHead, fields: maximumFields, line: maximumHead)
    /// The longest chunk-size line, and the most trailer bytes, of a chunked body.
    static let maximumChunkLine = 4096
    static let maximumTrailers = 16 * 1024

    @inline(__always) static func isValueByte(_ byte: UInt8) -> Bool { HeadSyntax.isValueByte(byte) }
}

/// A message that cannot be read, as the status its sender gets and why.
struct WireError: Error, CustomStringConvertible {
    let status: HTTPResponseStatus
    let message: String
    var description: String { message }

    init(status: HTTPResponseStatus, message: String) {
        self.status = status
        self.message = message
    }

    init(_ error: HeadError) {
        self.init(status: HTTPResponseStatus(statusCode: error.status), message: error.message)
    }

    static func bad(_ message: String) -> WireError { WireError(status: .badRequest, message: message) }
}

/// A head's bytes and its header lines; what both requests and responses have.
struct HeadFields {
    /// The head, from its start line through the empty line.
    let bytes: ByteBuffer
    let section: HeaderSection

    /// The start line, its CRLF included.
    var startLine: Range<Int> { section.startLine }
    var list: [Field] { section.list }
    var connectionNames: Set<String> { section.connectionNames }

    func has(_ kind: FieldKind) -> Bool { section.has(kind) }

    func string(_ range: Range<Int>) -> String {
        bytes.getString(at: bytes.readerIndex + range.lowerBound, length: range.count) ?? ""
    }

    /// Every value of the fields of one kind, in order.
    func values(_ kind: FieldKind) -> [String] {
        list.filter { $0.kind == kind }.map { string($0.value) }
    }

    /// The field may cross the proxy: it is not one the proxy drops, nor one Connection names (but for
    /// Content-Length: a message's framing is not the sender's to take off its hop).
    func passes(_ field: Field, dropping dropped: (FieldKind) -> Bool) -> Bool {
        if dropped(field.kind) { return false }
        return section.connectionNames.isEmpty || field.kind == .contentLength
            || !section.connectionNames.contains(string(field.name).lowercased())
    }
}
