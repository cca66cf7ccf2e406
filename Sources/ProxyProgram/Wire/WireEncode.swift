import NIOCore
import NIOHTTP1

/// Heads as the proxy writes them: the start line its own, the header lines
/// that cross copied as they came, its own lines after them.
extension ByteBuffer {
    /// What the upstream gets of the client's head: its method, `uri` (the path under the upstream's
    /// prefix), the end-to-end fields but the client's Host, credentials (DPoP included) and framing; then
    /// `credentialLines` (the upstream's Host, tokend's Authorization and Cookie) and the body's
    /// framing (`length`, or chunks with `chunked`, or none). A request line that would be written as it
    /// came is copied with the lines after it.
    mutating func writeUpstreamHead(_ head: RequestHead, uri: String, credentialLines: ByteBuffer, length: Int?, chunked: Bool) {
        head.bytes.withUnsafeReadableBytes { p in
            let asItCame = head.version.minor == 1 && uri == head.target
            if !asItCame {
                writeBytes(UnsafeRawBufferPointer(rebasing: p[head.methodBytes]))
                writeStaticString(" ")
                writeString(uri)
                writeStaticString(" HTTP/1.1\r\n")
            }
            writeLines(head.fields, p, from: asItCame ? head.fields.startLine : nil, dropping: Wire.requestDrops, droppingNamed: "dpop")
        }
        writeImmutableBuffer(credentialLines)
        if let length {
            writeStaticString("Content-Length: ")
            writeString(String(length))
            writeStaticString("\r\n")
        } else if chunked {
            writeStaticString("Transfer-Encoding: chunked\r\n")
        }
        writeStaticString("\r\n")
    }

    /// What the client gets of the upstream's head: its status and the end-to-end fields, in the
    /// client's HTTP version; chunks when the proxy frames the body (`chunked`), and what becomes of the
    /// connection.
    /// The client's head; `withoutCookies` leaves out Set-Cookie (tokend's jar has them). A 204 carries no
    /// Content-Length (RFC 9110 §8.6), whatever the upstream sent. No challenge (WWW-Authenticate) goes to
    /// the client: the proxy authenticates to the upstream, and a client that read one would begin a login
    /// of its own (an MCP client does, from the challenge's resource_metadata).
    /// Nor does an Authorization field an upstream put in its answer.
    mutating func writeClientHead(_ head: ResponseHead, version: HTTPVersion, chunked: Bool, close: Bool, withoutCookies: Bool = false) {
        let noLength = head.status == 204
        func dropped(_ kind: FieldKind) -> Bool {
            Wire.responseDrops(kind) || (noLength && kind == .contentLength) || (withoutCookies && kind == .setCookie)
        }
        head.bytes.withUnsafeReadableBytes { p in
            let asItCame = head.version == version
            if !asItCame {
                writeStaticString(version.minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ")
                let status = head.status
                writeInteger(UInt8(0x30 + status / 100))
                writeInteger(UInt8(0x30 + status / 10 % 10))
                writeInteger(UInt8(0x30 + status % 10))
                writeStaticString(" ")
                writeBytes(UnsafeRawBufferPointer(rebasing: p[head.reason]))
                writeStaticString("\r\n")
            }
            writeLines(head.fields, p, from: asItCame ? head.fields.startLine : nil, dropping: dropped, droppingNamed: "www-authenticate")
        }
        if chunked { writeStaticString("Transfer-Encoding: chunked\r\n") }
        if close {
            writeStaticString("Connection: close\r\n")
        } else if version.minor == 0 {
            writeStaticString("Connection: keep-alive\r\n")
        }
        writeStaticString("\r\n")
    }

    /// The header lines that cross, as they came: lines next to each other (and to `start`, the start
    /// line) in one copy. `droppingNamed`: a field the parser has no kind for that stays too (lowercase).
    private mutating func writeLines(
        _ fields: HeadFields, _ p: UnsafeRawBufferPointer, from start: Range<Int>?, dropping dropped: (FieldKind) -> Bool,
        droppingNamed named: StaticString? = nil
    ) {
        var run = start
        for field in fields.list where fields.passes(field, dropping: dropped) {
            if let named, field.kind == .other, field.name.count == named.utf8CodeUnitCount, HeadSyntax.equalsLowercase(p, field.name, named) {
                continue
            }
            if let current = run, current.upperBound == field.line.lowerBound {
                run = current.lowerBound..<field.line.upperBound
            } else {
                if let current = run { writeBytes(UnsafeRawBufferPointer(rebasing: p[current])) }
                run = field.line
            }
        }
        if let current = run { writeBytes(UnsafeRawBufferPointer(rebasing: p[current])) }
    }

    /// A chunk's size line (RFC 9112 §7.1).
    mutating func writeChunkSize(_ size: Int) {
        var shift = (Int.bitWidth - size.leadingZeroBitCount + 3) / 4 * 4
        if shift == 0 { shift = 4 }
        while shift > 0 {
            shift -= 4
            let digit = UInt8((size >> shift) & 0xF)
            writeInteger(digit < 10 ? 0x30 + digit : 0x57 + digit)
        }
        writeStaticString("\r\n")
    }
}

extension Wire {
    /// Fields the upstream does not get from the client: hop-by-hop ones, the client's Host and its own
    /// credentials, Expect (the proxy reads the body itself) and the framing, which the proxy writes.
    static func requestDrops(_ kind: FieldKind) -> Bool {
        switch kind {
        case .other, .origin, .secFetchSite, .setCookie: false
        default: true
        }
    }

    /// Fields the client does not get from the upstream: hop-by-hop ones and Transfer-Encoding, which
    /// the proxy writes itself when it frames the body; credentials.
    static func responseDrops(_ kind: FieldKind) -> Bool {
        switch kind {
        case .hopByHop, .connection, .transferEncoding, .authorization: true
        default: false
        }
    }

    /// The upstream's Host, tokend's Authorization, its DPoP proof (for a DPoP-bound token) and the Cookie
    /// header (when there are cookies), as lines.
    static func credentialLines(host: String, authorization: String, proof: String? = nil, cookies: String) -> ByteBuffer {
        var lines = ByteBuffer()
        lines.reserveCapacity(host.utf8.count + authorization.utf8.count + (proof?.utf8.count ?? 0) + cookies.utf8.count + 48)
        lines.writeStaticString("Host: ")
        lines.writeString(host)
        lines.writeStaticString("\r\nAuthorization: ")
        lines.writeString(authorization)
        lines.writeStaticString("\r\n")
        if let proof {
            lines.writeStaticString("DPoP: ")
            lines.writeString(proof)
            lines.writeStaticString("\r\n")
        }
        if !cookies.isEmpty {
            lines.writeStaticString("Cookie: ")
            lines.writeString(cookies)
            lines.writeStaticString("\r\n")
        }
        return lines
    }

    static let crlf = ByteBuffer(staticString: "\r\n")
    static let lastChunk = ByteBuffer(staticString: "0\r\n\r\n")
    static let continueAnswer = ByteBuffer(staticString: "HTTP/1.1 100 Continue\r\n\r\n")
}
