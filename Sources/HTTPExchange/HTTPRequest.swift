/// One HTTP/1.1 request as tokend sends it to a provider: the connection
/// headers (Host, Content-Length, Connection) are the exchange's, not the caller's.
public struct HTTPRequest: Sendable {
    public var method: String
    /// An absolute http or https URL; its fragment is never sent.
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(url: String, method: String = "GET", headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
    }

    public mutating func addHeader(name: String, value: String) {
        headers.append((name: name, value: value))
    }
}

/// What a request's URL says about where and how to send it.
struct RequestTarget: Sendable, Equatable {
    let secure: Bool
    /// Without the brackets of an IPv6 literal.
    let host: String
    let port: Int
    /// The origin-form request target: path and query, "/" when the URL has no path.
    let path: String

    init(_ url: String) throws(HTTPExchangeError) {
        guard let separator = url.firstRange(of: "://") else { throw .invalidURL("it has no scheme") }
        switch url[..<separator.lowerBound].lowercased() {
        case "http": secure = false
        case "https": secure = true
        default: throw .invalidURL("only http and https are spoken")
        }
        let rest = url[separator.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let reference = rest[authorityEnd...].prefix { $0 != "#" }
        path = reference.hasPrefix("/") ? String(reference) : "/" + reference
        // User information is never sent: a URL that carries it is a mistake or a trick.
        guard !authority.contains("@") else { throw .invalidURL("it carries user information") }
        var host = Substring(authority)
        var portText: Substring? = nil
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidURL("its IPv6 address has no ]") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .invalidURL("its host is followed by text") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        }
        // A host name goes into Host and SNI as it is: no spaces, controls or escapes.
        guard !host.isEmpty, host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "%") }) else {
            throw .invalidURL("its host is empty or not plain ASCII")
        }
        self.host = String(host)
        if let portText, !portText.isEmpty {
            guard portText.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let port = Int(portText), (1...65535).contains(port)
            else { throw .invalidURL("its port is not a number from 1 to 65535") }
            self.port = port
        } else {
            port = secure ? 443 : 80
        }
    }

    var isDefaultPort: Bool { port == (secure ? 443 : 80) }

    /// RFC 9112 §3.2: the port only when it is not the scheme's.
    var hostHeader: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return isDefaultPort ? shown : "\(shown):\(port)"
    }
}
