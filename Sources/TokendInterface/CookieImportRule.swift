#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Which cookies a browser-side client may move for a session: those whose
/// URL's host is the host of one of the session's web origins. A page on
/// another host cannot reach tokend's jar, and through it every client, even
/// under the same parent domain: a cookie a page on `evil.example.com` sets
/// for `Domain=example.com` has the URL `https://example.com/`, which is no
/// web origin's host when the origin is `https://app.example.com`.
///
/// The one rule for the browser bridge's native host (GetCookies and
/// ImportCookies) and for tokend-webview (the site's cookies it imports).
public struct CookieImportRule: Sendable, Equatable {
    /// The web origins' hosts, lowercased.
    public let hosts: Set<String>

    public init(webOrigins: [String]) {
        hosts = Set(webOrigins.compactMap(Self.host(of:)))
    }

    /// Whether cookies may move for `url`.
    public func allows(url: String) -> Bool {
        Self.host(of: url).map(hosts.contains) ?? false
    }

    /// A URL's host as compared here; nil for a URL without one.
    static func host(of url: String) -> String? {
        guard let host = URLComponents(string: url)?.host, !host.isEmpty else { return nil }
        return host.lowercased()
    }
}
