#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a URL a user names may reach, from tokend's own network position.
/// tokend connects with its own address and routes, so a user's URL must not
/// reach what the user could not: https only, and every address a host has
/// checked before the one connected to is chosen (see Outbound+Address,
/// Outbound+Fetch). The admin's `[user-sessions]` table fills it in.
public struct OutboundPolicy: Sendable, Equatable {
    /// [user-sessions] allow-loopback-http: plain http to loopback addresses (and loopback at all) is allowed.
    public var allowLoopbackHTTP: Bool
    /// [user-sessions] issuers: URL glob patterns ("https://*", "https://idp.corp.example/*"). A URL that matches a
    /// pattern whose host part has no '*' may reach private addresses (RFC 1918, ULA fc00::/7, 100.64/10 ...);
    /// link-local and cloud-metadata addresses are never reachable.
    public var patterns: [String]

    /// The largest body tokend reads from a user's server.
    public static let maximumBodySize = 256 * 1024
    /// The most redirects a GET follows, each one checked again.
    public static let maximumRedirects = 3

    public init(allowLoopbackHTTP: Bool = false, patterns: [String] = ["https://*"]) {
        self.allowLoopbackHTTP = allowLoopbackHTTP
        self.patterns = patterns
    }

    /// Whether an issuer (authorization server) URL matches one of the patterns.
    /// With allow-loopback-http, a loopback issuer (an IP literal in 127/8 or
    /// ::1, or `localhost`) is admitted too: loopback at all is what that key allows.
    public func admits(issuer: String) -> Bool {
        guard let url = URL(string: issuer), let target = URLPattern.Target(url) else { return false }
        if allowLoopbackHTTP, target.isLoopbackName { return true }
        return patterns.compactMap(URLPattern.init).contains { $0.matches(target) }
    }

    /// Whether `url` may reach private addresses: it matches a pattern that
    /// names its host without a wildcard, so the admin named that host.
    func mayReachPrivate(_ url: URL) -> Bool {
        guard let target = URLPattern.Target(url) else { return false }
        return patterns.compactMap(URLPattern.init).contains { !$0.hostHasWildcard && $0.matches(target) }
    }
}

/// A glob over URLs: `scheme://authority[path]`, where `*` in the authority
/// matches within the authority only (so `https://*.corp.example/*` cannot
/// match `https://evil.example/.corp.example/`), and `*` in the path matches
/// anything. A pattern without a path matches every path. An authority
/// without a port means the scheme's default port.
struct URLPattern: Sendable, Equatable {
    let scheme: String
    let authority: String
    let path: String?

    init?(_ text: String) {
        guard let separator = text.firstRange(of: "://") else { return nil }
        scheme = text[..<separator.lowerBound].lowercased()
        let rest = text[separator.upperBound...]
        let end = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        let authority = rest[..<end].lowercased()
        guard !scheme.isEmpty, !authority.isEmpty, !authority.contains("@") else { return nil }
        self.authority = Self.withoutDefaultPort(authority, scheme: scheme)
        path = end == rest.endIndex ? nil : String(rest[end...])
    }

    var hostHasWildcard: Bool { authority.contains("*") }

    func matches(_ target: Target) -> Bool {
        guard target.scheme == scheme, Self.glob(authority, target.authority) else { return false }
        guard let path else { return true }
        return Self.glob(path, target.pathAndQuery)
    }

    static func withoutDefaultPort(_ authority: String, scheme: String) -> String {
        let suffix = scheme == "https" ? ":443" : scheme == "http" ? ":80" : nil
        guard let suffix, authority.hasSuffix(suffix) else { return authority }
        return String(authority.dropLast(suffix.count))
    }

    /// `*` matches any run of characters, everything else itself.
    static func glob(_ pattern: String, _ text: String) -> Bool {
        let pattern = Array(pattern.utf8), text = Array(text.utf8)
        var (p, t) = (0, 0)
        var star: (p: Int, t: Int)? = nil
        while t < text.count {
            if p < pattern.count, pattern[p] == UInt8(ascii: "*") {
                star = (p, t)
                p += 1
            } else if p < pattern.count, pattern[p] == text[t] {
                p += 1
                t += 1
            } else if let last = star {
                p = last.p + 1
                t = last.t + 1
                star = (last.p, last.t + 1)
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == UInt8(ascii: "*") { p += 1 }
        return p == pattern.count
    }

    /// A URL as patterns see it: lowercased scheme and authority (no user
    /// information: such a URL matches nothing), the default port left out.
    struct Target: Sendable {
        let scheme: String
        let host: String
        let authority: String
        let pathAndQuery: String

        init?(_ url: URL) {
            guard let scheme = url.scheme?.lowercased(), let host = Outbound.host(of: url), url.user == nil,
                url.password == nil
            else { return nil }
            self.scheme = scheme
            self.host = host.lowercased()
            let shownHost = self.host.contains(":") ? "[\(self.host)]" : self.host
            authority = URLPattern.withoutDefaultPort(url.port.map { "\(shownHost):\($0)" } ?? shownHost, scheme: scheme)
            let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            let path = components?.percentEncodedPath ?? ""
            pathAndQuery = (path.isEmpty ? "/" : path) + (components?.percentEncodedQuery.map { "?\($0)" } ?? "")
        }

        var isLoopbackName: Bool {
            host == "localhost" || IPAddress(host)?.kind.isLoopback == true
        }
    }
}

/// A URL tokend will not connect to for a user, and why.
public struct AddressRefused: Error, CustomStringConvertible, Sendable, Equatable {
    public let url: String
    /// The address refused, when an address was the reason (not the scheme or a pattern).
    public let address: String?
    public let reason: String

    public init(url: String, address: String?, reason: String) {
        self.url = url
        self.address = address
        self.reason = reason
    }

    public var description: String { "\(url): \(reason); tokend does not connect there for a user" }

    /// The TokenEndpointError code a refusal carries through an endpoint's requests.
    public static let code = "tokend:address_refused"
}

/// A step of discovery or registration that did not give what it needs.
public struct DiscoveryFailed: Error, CustomStringConvertible, Sendable, Equatable {
    /// "challenge", "resource-metadata", "server-metadata", "registration", "authorization", "token"
    public let step: String
    public let url: String
    /// The HTTP status, when the server answered.
    public let status: Int?
    public let reason: String

    public init(step: String, url: String, status: Int?, reason: String) {
        self.step = step
        self.url = url
        self.status = status
        self.reason = reason
    }

    public var description: String {
        "\(step): \(url)\(status.map { " answered HTTP \($0)" } ?? ""): \(reason)"
    }
}

/// What the guard shares between its files.
enum Outbound {
    /// A URL's host (URL.host, IPv6 brackets trimmed): the name resolved and
    /// checked, while the connection goes to a checked address (see Outbound+Fetch).
    static func host(of url: URL) -> String? {
        guard var host = url.host, !host.isEmpty else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host
    }
}
