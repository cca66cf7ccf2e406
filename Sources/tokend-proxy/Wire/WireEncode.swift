import NIOCore
import NIOHTTP1

/// Heads as the proxy writes them: the start line its own, the header lines
/// that cross copied as they came, its own lines after them.
extension ByteBuffer {
    /// What the upstream gets of the client's head: its method, `uri` (the path under the upstream's
    /// prefix), the end-to-end fields but the client's Host, credentials and framing; then the
    /// upstream's Host, tokend's Authorization and Cookie, and the body's framing (`length`, or chunks
    /// with `chunked`, or none).
    mutating func writeUpstreamHead(
        _ head: RequestHead, uri: String, host: String, authorization: String, cookies: String, length: Int?, chunked: Bool
    ) {
        head.bytes.withUnsafeReadableBytes { p in
            writeBytes(UnsafeRawBufferPointer(rebasing: p[head.methodBytes]))
            writeStaticString(" ")
            writeString(uri)
            writeStaticString(" HTTP/1.1\r\n")
            for field in head.fields.list where head.fields.passes(field, dropping: Wire.requestDrops) {
                writeBytes(UnsafeRawBufferPointer(rebasing: p[field.line]))
            }
        }
        writeStaticString("Host: ")
        writeString(host)
        writeStaticString("\r\nAuthorization: ")
        writeString(authorization)
        writeStaticString("\r\n")
        if !cookies.isEmpty {
            writeStaticString("Cookie: ")
            writeString(cookies)
            writeStaticString("\r\n")
        }
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
    mutating func writeClientHead(_ head: ResponseHead, version: HTTPVersion, chunked: Bool, close: Bool) {
        writeStaticString(version.minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ")
        let status = head.status
        writeInteger(UInt8(0x30 + status / 100))
        writeInteger(UInt8(0x30 + status / 10 % 10))
        writeInteger(UInt8(0x30 + status % 10))
        writeStaticString(" ")
        head.bytes.withUnsafeReadableBytes { p in
            writeBytes(UnsafeRawBufferPointer(rebasing: p[head.reason]))
            writeStaticString("\r\n")
            for field in head.fields.list where head.fields.passes(field, dropping: Wire.responseDrops) {
                writeBytes(UnsafeRawBufferPointer(rebasing: p[field.line]))
            }
        }
        if chunked { writeStaticString("Transfer-Encoding: chunked\r\n") }
        if close {
            writeStaticString("Connection: close\r\n")
        } else if version.minor == 0 {
            writeStaticString("Connection: keep-alive\r\n")
        }
        writeStaticString("\r\n")
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
    /// the proxy writes itself when it frames the body.
    static func responseDrops(_ kind: FieldKind) -> Bool {
        switch kind {
        case .hopByHop, .connection, .transferEncoding: true
        default: false
        }
    }

    static let crlf = ByteBuffer(staticString: "\r\n")
    static let lastChunk = ByteBuffer(staticString: "0\r\n\r\n")
    static let continueAnswer = ByteBuffer(staticString: "HTTP/1.1 100 Continue\r\n\r\n")
}
