import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

/// HTTP/1.1 (RFC 9112) as the proxy reads and writes it: heads are parsed in
/// place, their header lines kept as byte ranges and copied through whole,
/// bodies passed on as slices of the bytes that came. NIO's HTTP/1 codecs
/// turned every message into header strings and back twice per request
/// (client, upstream, upstream, client): the largest cost left in the proxy
/// (bench/README.md). The parser is strict where leniency lets two parsers
/// disagree on where a message ends: a LF without its CR, a folded line, a
/// space before a colon, both Content-Length and Transfer-Encoding, lengths
/// that differ, a transfer coding other than chunked: each is refused.
enum Wire {
    /// The longest head read (start line and header fields).
    static let maximumHead = 64 * 1024
    /// The longest chunk-size line, and the most trailer bytes, of a chunked body.
    static let maximumChunkLine = 4096
    static let maximumTrailers = 16 * 1024
    /// The most header lines a head may have: what a field costs to note is bounded per head.
    static let maximumFields = 256
}

/// A message that cannot be read, as the status its sender gets and why.
struct WireError: Error, CustomStringConvertible {
    let status: HTTPResponseStatus
    let message: String
    var description: String { message }

    static func bad(_ message: String) -> WireError { WireError(status: .badRequest, message: message) }
}

/// What a header field is to the proxy, from its name (case-insensitive).
enum FieldKind: UInt8 {
    case other, host, contentLength, transferEncoding, connection, cookie, authorization, expect, origin, secFetchSite, setCookie
    /// RFC 9110 §7.6.1's hop-by-hop fields besides Connection, and the proxy fields of old.
    case hopByHop
}

/// One header line of a head: where it is in the head's bytes, its CRLF included.
struct Field {
    let line: Range<Int>
    let name: Range<Int>
    /// Without the whitespace around it.
    let value: Range<Int>
    let kind: FieldKind
}

/// A head's bytes and its header lines; what both requests and responses have.
struct HeadFields {
    /// The head, from its start line through the empty line.
    let bytes: ByteBuffer
    /// The start line, its CRLF included.
    let startLine: Range<Int>
    let list: [Field]
    /// Lowercased names the Connection header lists besides close and keep-alive: these stay on their hop.
    let connectionNames: Set<String>
    /// The Connection header lists close / keep-alive.
    let close: Bool
    let keepAlive: Bool

    init(bytes: ByteBuffer, startLine: Range<Int>, list: [Field], _ p: UnsafeRawBufferPointer) {
        self.bytes = bytes
        self.startLine = startLine
        self.list = list
        var close = false
        var keepAlive = false
        var names: Set<String> = []
        for field in list where field.kind == .connection {
            var start = field.value.lowerBound
            while start < field.value.upperBound {
                var end = start
                while end < field.value.upperBound, p[end] != UInt8(ascii: ",") { end += 1 }
                var first = start
                var last = end
                while first < last, p[first] == 0x20 || p[first] == 0x09 { first += 1 }
                while last > first, p[last - 1] == 0x20 || p[last - 1] == 0x09 { last -= 1 }
                if Wire.equalsLowercase(p, first..<last, "close") {
                    close = true
                } else if Wire.equalsLowercase(p, first..<last, "keep-alive") {
                    keepAlive = true
                } else if first < last {
                    names.insert(String(decoding: UnsafeRawBufferPointer(rebasing: p[first..<last]), as: UTF8.self).lowercased())
                }
                start = end + 1
            }
        }
        self.close = close
        self.keepAlive = keepAlive
        connectionNames = names
    }

    /// The first field of a kind holds `value` (ASCII, case-insensitive), and no other field of it does not.
    func only(_ kind: FieldKind, isOneOf values: [[UInt8]]) -> Bool {
        var found = false
        for field in list where field.kind == kind {
            if found { return false }
            let matches = bytes.withUnsafeReadableBytes { p in values.contains { Wire.equalsLowercase(p, field.value, $0) } }
            guard matches else { return false }
            found = true
        }
        return found
    }

    func has(_ kind: FieldKind) -> Bool { list.contains { $0.kind == kind } }

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
        return connectionNames.isEmpty || field.kind == .contentLength || !connectionNames.contains(string(field.name).lowercased())
    }
}

extension Wire {
    /// The length of the head at the start of `p`, through its empty line, or nil while it is not whole.
    /// `scanned` is where the line not yet seen whole begins, so that a head coming in pieces is read once.
    static func headLength(_ p: UnsafeRawBufferPointer, scanned: inout Int) throws(WireError) -> Int? {
        var start = scanned
        while start < p.count {
            guard let found = memchr(p.baseAddress! + start, 0x0A, p.count - start) else { return nil }
            let lf = UnsafeRawPointer(found) - p.baseAddress!
            guard lf > start, p[lf - 1] == 0x0D else { throw .bad("a line ends in LF without CR") }
            if lf - 1 == start { return lf + 1 }
            start = lf + 1
            scanned = start
        }
        return nil
    }

    /// `headLength` over a buffer's readable bytes.
    static func headLength(of buffer: ByteBuffer, scanned: inout Int) throws(WireError) -> Int? {
        var at = scanned
        let result = buffer.withUnsafeReadableBytes { p in Result { () throws(WireError) in try headLength(p, scanned: &at) } }
        scanned = at
        return try result.get()
    }

    /// The header lines from `start` to the head's empty line; `p` is a whole head.
    static func fields(_ p: UnsafeRawBufferPointer, from start: Int) throws(WireError) -> [Field] {
        var fields: [Field] = []
        fields.reserveCapacity(16)
        var at = start
        let end = p.count - 2  // the empty line
        while at < end {
            let lineEnd = UnsafeRawPointer(memchr(p.baseAddress! + at, 0x0A, p.count - at)!) - p.baseAddress! + 1
            let contentEnd = lineEnd - 2
            if p[at] == 0x20 || p[at] == 0x09 { throw .bad("a header line is folded (obs-fold)") }
            var colon = at
            while colon < contentEnd, isTokenByte(p[colon]) { colon += 1 }
            guard colon > at, colon < contentEnd, p[colon] == 0x3A else {
                throw .bad("a header line has no name, or a character a name may not have, before its colon")
            }
            var valueStart = colon + 1
            while valueStart < contentEnd, p[valueStart] == 0x20 || p[valueStart] == 0x09 { valueStart += 1 }
            var valueEnd = contentEnd
            while valueEnd > valueStart, p[valueEnd - 1] == 0x20 || p[valueEnd - 1] == 0x09 { valueEnd -= 1 }
            for index in valueStart..<valueEnd where !isValueByte(p[index]) {
                throw .bad("a header value has a control character")
            }
            guard fields.count < maximumFields else {
                throw WireError(status: .requestHeaderFieldsTooLarge, message: "the head has more than \(maximumFields) header lines")
            }
            fields.append(Field(line: at..<lineEnd, name: at..<colon, value: valueStart..<valueEnd, kind: kind(p, at..<colon)))
            at = lineEnd
        }
        return fields
    }

    /// RFC 9110 §5.6.2 tchar.
    @inline(__always) static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    /// RFC 9110 §5.5 field-vchar, SP and HTAB (obs-text included).
    @inline(__always) static func isValueByte(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte != 0x7F || byte == 0x09
    }

    /// The bytes at `range` are `lowercase` but for the case of their letters.
    static func equalsLowercase(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard lowercase.utf8CodeUnitCount == range.count else { return false }
        let expected = lowercase.utf8Start
        for offset in 0..<range.count where lower(p[range.lowerBound + offset]) != expected[offset] {
            return false
        }
        return true
    }

    static func equalsLowercase(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: [UInt8]) -> Bool {
        guard lowercase.count == range.count else { return false }
        for offset in 0..<range.count where lower(p[range.lowerBound + offset]) != lowercase[offset] {
            return false
        }
        return true
    }

    @inline(__always) static func lower(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    static func kind(_ p: UnsafeRawBufferPointer, _ name: Range<Int>) -> FieldKind {
        func named(_ lowercase: StaticString) -> Bool { equalsLowercase(p, name, lowercase) }
        switch name.count {
        case 2: return named("te") ? .hopByHop : .other
        case 4: return named("host") ? .host : .other
        case 6:
            if named("cookie") { return .cookie }
            if named("origin") { return .origin }
            return named("expect") ? .expect : .other
        case 7: return named("trailer") || named("upgrade") ? .hopByHop : .other
        case 10:
            if named("connection") { return .connection }
            if named("set-cookie") { return .setCookie }
            return named("keep-alive") ? .hopByHop : .other
        case 13: return named("authorization") ? .authorization : .other
        case 14:
            if named("content-length") { return .contentLength }
            return named("sec-fetch-site") ? .secFetchSite : .other
        case 16: return named("proxy-connection") ? .hopByHop : .other
        case 17: return named("transfer-encoding") ? .transferEncoding : .other
        case 18: return named("proxy-authenticate") ? .hopByHop : .other
        case 19: return named("proxy-authorization") ? .hopByHop : .other
        default: return .other
        }
    }
}
