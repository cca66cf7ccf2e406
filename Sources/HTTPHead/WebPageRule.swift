/// Who may send a request to a loopback HTTP listener, as far as web pages
/// go: programs, and no page but the listener's own. A page on another site
/// can make the browser send requests anywhere (a cross-site `no-cors` POST
/// needs no permission); a page on another loopback port is same-site but
/// another origin; a page whose name was rebound to 127.0.0.1 reads the
/// answers. So:
/// - the Host must name the listener (its IP literal or localhost, and its
///   port): what a program connecting there writes, never what a rebound
///   page sends;
/// - an Origin must be the listener's own, and a Sec-Fetch-Site must be
///   `same-origin` or `none` (typed into the address bar);
/// - where the listener is the target of a redirect from another site (a
///   login's callback), a top-level navigation may come from any site: it is
///   what the user's browser does, and no page can read its answer.
public struct WebPageRule: Sendable {
    /// The Host values that name the listener, lowercased ("127.0.0.1:8080", "localhost:8080"); nil where
    /// no page can reach it (a Unix socket), whose Host is whatever the client makes up.
    public let hosts: Set<String>?
    /// Named in refusals: "the proxy", "tokend's metrics listener".
    public let listener: String
    /// A top-level navigation from another site is served.
    public let allowsNavigations: Bool
    private let hostBytes: [[UInt8]]
    private let originBytes: [[UInt8]]

    public init(hosts: Set<String>?, listener: String, allowsNavigations: Bool = false) {
        let hosts = hosts.map { Set($0.map { $0.lowercased() }) }
        self.hosts = hosts
        self.listener = listener
        self.allowsNavigations = allowsNavigations
        hostBytes = (hosts ?? []).map { Array($0.utf8) }
        originBytes = (hosts ?? []).map { Array("http://\($0)".utf8) }
    }

    /// For a listener on `ip` (a literal: "127.0.0.1", "::1" or "[::1]") and `port`, after binding.
    public init(listener: String, ip: String, port: Int, allowsNavigations: Bool = false) {
        self.init(hosts: Self.hosts(ip: ip, port: port), listener: listener, allowsNavigations: allowsNavigations)
    }

    /// The literal and localhost, with the port; without it too for port 80 (RFC 9110 §7.2: a Host without
    /// a port means the scheme's default).
    public static func hosts(ip: String, port: Int) -> Set<String> {
        let bare = ip.hasPrefix("[") && ip.hasSuffix("]") ? String(ip.dropFirst().dropLast()) : ip
        let literal = bare.contains(":") ? "[\(bare)]" : bare
        let ports = port == 80 ? [":80", ""] : [":\(port)"]
        return Set([literal.lowercased(), "localhost"].flatMap { name in ports.map { name + $0 } })
    }

    /// Why a request a web page may have sent is refused, or nil to serve it. `p` is the head's bytes.
    public func refusal(_ fields: HeaderSection, in p: UnsafeRawBufferPointer) -> WebPageRefusal? {
        if let hosts, !fields.only(.host, isOneOf: hostBytes, in: p) {
            return WebPageRefusal(
                status: 421,
                message: "the Host must be an address \(listener) listens on (\(hosts.sorted().joined(separator: ", "))); "
                    + "another name is what a page sends after rebinding its DNS name to this address")
        }
        var navigation: Bool?
        for field in fields.list where field.kind == .origin || field.kind == .secFetchSite {
            if allowsNavigations {
                if navigation == nil { navigation = Self.isNavigation(fields, p) }
                if navigation == true { return nil }
            }
            if field.kind == .origin {
                guard !originBytes.contains(where: { HeadSyntax.equalsLowercase(p, field.value, $0) }) else { continue }
                return WebPageRefusal(
                    status: 403,
                    message: "a request from the web page \(HeadSyntax.string(p, field.value).prefix(100)) is refused: "
                        + "only \(listener)'s own origin may use it")
            }
            let site = HeadSyntax.string(p, field.value)
            if site != "same-origin" && site != "none" {
                return WebPageRefusal(
                    status: 403,
                    message: "a request a browser marks Sec-Fetch-Site: \(site.prefix(20)) is refused: only \(listener)'s own origin may use it")
            }
        }
        return nil
    }

    public func refusal(for head: HTTPRequestHead) -> WebPageRefusal? {
        head.bytes.withUnsafeBytes { refusal(head.syntax.fields, in: $0) }
    }

    /// The browser opens the target as its top-level document: a link followed, a redirect, a form sent.
    private static func isNavigation(_ fields: HeaderSection, _ p: UnsafeRawBufferPointer) -> Bool {
        fields.values(named: "sec-fetch-mode", in: p) == ["navigate"] && fields.values(named: "sec-fetch-dest", in: p) == ["document"]
    }
}

/// A request refused by `WebPageRule`: 421 for a Host that does not name the listener, 403 for a page.
public struct WebPageRefusal: Sendable, Equatable {
    public let status: Int
    public let message: String
    public var reason: String { ReasonPhrase.of(status) }
}
