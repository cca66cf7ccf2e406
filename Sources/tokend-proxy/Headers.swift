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
        let named = headers["Connection"].flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
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
