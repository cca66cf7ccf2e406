#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A head's start line and header lines, as places in its bytes; what
/// requests and responses have alike. The bytes stay with the caller (a
/// ByteBuffer, an array): every question about a value is asked with them.
public struct HeaderSection: Sendable {
    /// The start line, its CRLF included.
    public let startLine: Range<Int>
    public let list: [Field]
    /// Lowercased names the Connection header lists besides close and keep-alive: these stay on their hop.
    public let connectionNames: Set<String>
    /// The Connection header lists close / keep-alive.
    public let close: Bool
    public let keepAlive: Bool

    /// The header lines from `start` to the empty line of `p`, a whole head. Refused: a folded line
    /// (obs-fold), a name with a character a token may not have or a space before its colon, a value
    /// with a control character, more lines than `limits.fields` (431).
    init(_ p: UnsafeRawBufferPointer, startLine: Range<Int>, limits: HeadLimits) throws(HeadError) {
        var fields: [Field] = []
        fields.reserveCapacity(16)
        var at = startLine.upperBound
        let end = p.count - 2  // the empty line
        while at < end {
            let lineEnd = UnsafeRawPointer(memchr(p.baseAddress! + at, 0x0A, p.count - at)!) - p.baseAddress! + 1
            let contentEnd = lineEnd - 2
            // What HeadScanner checks as the bytes come, checked again of a head handed over whole.
            guard p[contentEnd] == 0x0D else { throw .bad("a line ends in LF without CR") }
            guard lineEnd - at <= limits.line else { throw HeadError(status: 431, message: "a header line is longer than \(limits.line) bytes") }
            if HeadSyntax.isSpace(p[at]) { throw .bad("a header line is folded (obs-fold)") }
            var colon = at
            while colon < contentEnd, HeadSyntax.isTokenByte(p[colon]) { colon += 1 }
            guard colon > at, colon < contentEnd, p[colon] == 0x3A else {
                throw .bad("a header line has no name, or a character a name may not have, before its colon")
            }
            var valueStart = colon + 1
            while valueStart < contentEnd, HeadSyntax.isSpace(p[valueStart]) { valueStart += 1 }
            var valueEnd = contentEnd
            while valueEnd > valueStart, HeadSyntax.isSpace(p[valueEnd - 1]) { valueEnd -= 1 }
            for index in valueStart..<valueEnd where !HeadSyntax.isValueByte(p[index]) {
                throw .bad("a header value has a control character")
            }
            guard fields.count < limits.fields else {
                throw HeadError(status: 431, message: "the head has more than \(limits.fields) header lines")
            }
            fields.append(Field(line: at..<lineEnd, name: at..<colon, value: valueStart..<valueEnd, kind: .of(p, at..<colon)))
            at = lineEnd
        }
        self.startLine = startLine
        list = fields
        var close = false
        var keepAlive = false
        var names: Set<String> = []
        for field in fields where field.kind == .connection {
            var start = field.value.lowerBound
            while start < field.value.upperBound {
                var end = start
                while end < field.value.upperBound, p[end] != UInt8(ascii: ",") { end += 1 }
                var first = start
                var last = end
                while first < last, HeadSyntax.isSpace(p[first]) { first += 1 }
                while last > first, HeadSyntax.isSpace(p[last - 1]) { last -= 1 }
                if HeadSyntax.equalsLowercase(p, first..<last, "close") {
                    close = true
                } else if HeadSyntax.equalsLowercase(p, first..<last, "keep-alive") {
                    keepAlive = true
                } else if first < last {
                    names.insert(HeadSyntax.string(p, first..<last).lowercased())
                }
                start = end + 1
            }
        }
        self.close = close
        self.keepAlive = keepAlive
        connectionNames = names
    }

    /// The connection stays open after this message (RFC 9112 §9.3), for HTTP/1.`minor`.
    public func persists(minor: Int) -> Bool {
        minor == 1 ? !close : keepAlive && !close
    }

    public func has(_ kind: FieldKind) -> Bool { list.contains { $0.kind == kind } }

    /// Exactly one field of a kind, and it holds one of `values` (lowercase ASCII, compared without case).
    public func only(_ kind: FieldKind, isOneOf values: [[UInt8]], in p: UnsafeRawBufferPointer) -> Bool {
        var found = false
        for field in list where field.kind == kind {
            if found { return false }
            guard values.contains(where: { HeadSyntax.equalsLowercase(p, field.value, $0) }) else { return false }
            found = true
        }
        return found
    }

    /// Every value of the fields of one kind, in order.
    public func values(_ kind: FieldKind, in p: UnsafeRawBufferPointer) -> [String] {
        list.filter { $0.kind == kind }.map { HeadSyntax.string(p, $0.value) }
    }

    /// Every value of the fields named `name`, in any case.
    public func values(named name: String, in p: UnsafeRawBufferPointer) -> [String] {
        let lowercase = Array(name.lowercased().utf8)
        return list.filter { HeadSyntax.equalsLowercase(p, $0.name, lowercase) }.map { HeadSyntax.string(p, $0.value) }
    }

    /// Content-Length and Transfer-Encoding (RFC 9112 §6): one length, however often it is given, or
    /// chunked alone; both at once is how messages are smuggled past a proxy, and is refused (400; a
    /// coding other than chunked, 501).
    func framing(_ p: UnsafeRawBufferPointer) throws(HeadError) -> (length: Int?, chunked: Bool) {
        var length: Int?
        var chunked = false
        let refused = { (message: String) in HeadError(status: 400, message: message) }
        for field in list {
            switch field.kind {
            case .contentLength:
                // 1*DIGIT, or a list of the same one ("5, 5"), as some senders join repeated fields.
                var at = field.value.lowerBound
                while true {
                    while at < field.value.upperBound, HeadSyntax.isSpace(p[at]) { at += 1 }
                    var value = 0
                    var digits = 0
                    while at < field.value.upperBound, p[at] >= 0x30 && p[at] <= 0x39 {
                        guard digits < 18 else { throw refused("Content-Length is too large") }
                        value = value * 10 + Int(p[at] - 0x30)
                        digits += 1
                        at += 1
                    }
                    while at < field.value.upperBound, HeadSyntax.isSpace(p[at]) { at += 1 }
                    guard digits > 0, at == field.value.upperBound || p[at] == UInt8(ascii: ",") else {
                        throw refused("Content-Length is not a number")
                    }
                    guard length == nil || length == value else { throw refused("Content-Length is given twice, differently") }
                    length = value
                    if at == field.value.upperBound { break }
                    at += 1
                }
            case .transferEncoding:
                guard !chunked, HeadSyntax.equalsLowercase(p, field.value, "chunked") else {
                    throw HeadError(status: 501, message: "a Transfer-Encoding other than chunked is not supported")
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
