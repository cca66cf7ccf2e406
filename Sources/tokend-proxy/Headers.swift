import Foundation
import NIOHTTP1

/// What crosses the proxy of a message's headers.
enum Headers {
    /// The client's headers as the upstream gets them: hop-by-hop ones, the client's Host and its own
    /// credentials go; tokend's token and cookies and the upstream's Host come in.
    static func forwarded(_ headers: HTTPHeaders, host: String, authorization: String, cookies: String) -> HTTPHeaders {
        var result = endToEnd(headers, dropping: ["host", "cookie", "authorization", "expect"])
        result.add(name: "Host", value: host)
        result.add(name: "Authorization", value: authorization)
        if !cookies.isEmpty { result.add(name: "Cookie", value: cookies) }
        return result
    }

    /// RFC 9110 §7.6.1: hop-by-hop headers, and those the Connection header names, stay on their hop
    /// (Expect too: the proxy reads the body itself, so the upstream gets it whole).
    static func endToEnd(_ headers: HTTPHeaders, dropping more: [String] = []) -> HTTPHeaders {
        // "keep-alive" or "close" alone, the common case, names no header of its own to drop.
        let connection = headers["Connection"]
        let named = connection.allSatisfy(namesNoHeader) ? [] : connection.flatMap(connectionOptions)
        var result = HTTPHeaders()
        result.reserveCapacity(headers.count + 3)
        for (name, value) in headers where !isHopByHop(name) {
            let length = name.utf8.count
            if !named.isEmpty || more.contains(where: { $0.utf8.count == length }) {
                let lowered = name.lowercased()
                if more.contains(lowered) || named.contains(lowered) { continue }
            }
            result.add(name: name, value: value)
        }
        return result
    }

    /// A Connection header's options (RFC 9110 §7.6.1), lowercased, without the spaces around them.
    static func connectionOptions(_ value: String) -> [String] {
        value.utf8.split(separator: UInt8(ascii: ",")).compactMap { option in
            let trimmed = option.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed()
            return trimmed.isEmpty ? nil : String(decoding: trimmed, as: UTF8.self).lowercased()
        }
    }

    static func namesNoHeader(_ connection: String) -> Bool {
        switch connection.utf8.count {
        case 5: connection.lowercased() == "close"
        case 10: connection.lowercased() == "keep-alive"
        default: false
        }
    }

    /// A value a header may carry (RFC 9110 §5.5): no control character but tab, so no CR or LF that
    /// would end the header and begin another. The proxy's own values (tokend's token and cookies) are
    /// checked once, when tokend gives them; the rest came through an HTTP parser.
    static func isFieldValue(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }
    }

    /// The hop-by-hop headers of RFC 9110 §7.6.1 and the proxy headers of old, without lowercasing a name
    /// whose length rules it out.
    static func isHopByHop(_ name: String) -> Bool {
        switch name.utf8.count {
        case 2: name.lowercased() == "te"
        case 7: ["trailer", "upgrade"].contains(name.lowercased())
        case 10: ["connection", "keep-alive"].contains(name.lowercased())
        case 16: name.lowercased() == "proxy-connection"
        case 17: name.lowercased() == "transfer-encoding"
        case 18: name.lowercased() == "proxy-authenticate"
        case 19: name.lowercased() == "proxy-authorization"
        default: false
        }
    }
}
