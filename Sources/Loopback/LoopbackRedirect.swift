#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An exact loopback redirect URI (RFC 8252 §7.3), said once for the
/// configuration and tokenctl's listener: `http://127.0.0.1:PORT/PATH` or
/// `http://[::1]:PORT/PATH` — http, an IP literal tokenctl can listen on
/// itself, an explicit port, and a path with no dot segment (a browser would
/// resolve it away and the callback would never match). No user, query or
/// fragment.
public struct LoopbackRedirect: Sendable, Equatable {
    /// As URLComponents gives it ("127.0.0.1", "::1" or "[::1]").
    public let host: String
    public let port: UInt16
    /// The path as the browser sends it, percent-encoding kept.
    public let path: String
    /// Scheme, host and port exactly as written: a callback is this plus the request target.
    public let origin: String

    public init?(_ text: String) {
        guard let url = URLComponents(string: text), url.scheme == "http", let host = url.host,
            Loopback.isLiteral(host), let port = url.port, (1...65535).contains(port),
            url.user == nil, url.password == nil, url.query == nil, url.fragment == nil,
            url.percentEncodedPath.hasPrefix("/"), let range = url.rangeOfPath
        else { return nil }
        let path = url.percentEncodedPath
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        guard !segments.contains(where: { [".", ".."].contains($0.percentDecoded ?? "..") }) else { return nil }
        self.host = host
        self.port = UInt16(port)
        self.path = path
        origin = String(text[..<range.lowerBound])
    }
}
