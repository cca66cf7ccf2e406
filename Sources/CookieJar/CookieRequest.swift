#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

/// The parts of a request URL that cookie storage and retrieval look at.
public struct CookieRequest: Sendable, Equatable {
    /// Canonical host: lowercase.
    public var host: String
    /// The percent-encoded path, "/" when empty.
    public var path: String
    /// A secure context: https, or http to a loopback IP literal (never a name
    /// such as `127.example.com`, which anything may resolve to).
    public var secure: Bool

    public init(host: String, path: String, secure: Bool) {
        self.host = host.lowercased()
        self.path = path.isEmpty ? "/" : path
        self.secure = secure
    }

    /// nil unless the URL is http(s) with a host.
    public init?(url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.percentEncodedHost, !host.isEmpty
        else { return nil }
        var canonical = host.lowercased()
        if canonical.hasPrefix("["), canonical.hasSuffix("]") { canonical = String(canonical.dropFirst().dropLast()) }
        self.init(
            host: canonical, path: components.percentEncodedPath,
            secure: scheme == "https" || Loopback.isLiteral(canonical))
    }

    public init?(string: String) {
        guard let url = URL(string: string) else { return nil }
        self.init(url: url)
    }

    /// True for IPv4 and IPv6 literals, which only ever match exactly.
    var hostIsIPAddress: Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in !part.isEmpty && part.allSatisfy(\.isNumber) }
    }

    /// §5.1.4: the directory of the request path.
    public var defaultPath: String {
        guard path.hasPrefix("/"), let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// §5.1.3: the request host domain-matches `domain`.
    public func domainMatches(_ domain: String) -> Bool {
        if host == domain { return true }
        return !hostIsIPAddress && host.hasSuffix("." + domain)
    }

    /// §5.1.4: the request path path-matches `cookiePath`.
    public func pathMatches(_ cookiePath: String) -> Bool {
        if path == cookiePath { return true }
        guard path.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || path.dropFirst(cookiePath.count).first == "/"
    }
}
