import Foundation

/// Which URLs a page may have DPoP proofs for: URLs within one of the
/// session's web-resources. The one rule for the browser bridge's native host
/// and for tokend-webview (GetProof from pages).
///
/// A web resource is an absolute http or https URI (RFC 8707 §2). A URL is
/// within it when
/// - scheme and host are the resource's (compared in lower case) and so is the
///   port (a missing port is the scheme's default: 443 for https, 80 for http);
/// - its path starts with the resource's path (an empty path is "/"), compared
///   as written, percent-encoding included, and at a segment boundary: the
///   resource `https://api.example/mail` covers `/mail` and `/mail/inbox`, not
///   `/mailbox`; `https://api.example/mail/` covers `/mail/…`, not `/mail`;
/// - its path has no "." or ".." segment (also percent-encoded, also with path
///   parameters: `..;x`) and no encoded "/" or "\" (%2F, %5C): a server
///   resolves `/mail/../admin` to `/admin`, outside the resource, and some
///   decode those or drop parameters before resolving;
/// - it carries no user name or password. Query and fragment are not compared.
public struct WebResourceRule: Sendable, Equatable {
    /// The resources a URL may be within: (scheme, host, port, path).
    let resources: [Place]

    struct Place: Sendable, Equatable {
        var scheme: String
        var host: String
        var port: Int
        var path: String
    }

    public init(webResources: [String]) {
        resources = webResources.compactMap(Self.place(of:))
    }

    /// Whether `url` is within one of the resources.
    public func allows(url: String) -> Bool {
        guard let target = Self.place(of: url), !Self.mayEscape(target.path) else { return false }
        return resources.contains { Self.contains($0, target) }
    }

    static func contains(_ resource: Place, _ target: Place) -> Bool {
        guard resource.scheme == target.scheme, resource.host == target.host, resource.port == target.port,
            target.path.hasPrefix(resource.path)
        else { return false }
        if resource.path.hasSuffix("/") || target.path.count == resource.path.count { return true }
        return target.path.dropFirst(resource.path.count).first == "/"
    }

    static func place(of url: String) -> Place? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "https" || scheme == "http",
            let host = components.percentEncodedHost?.lowercased(), !host.isEmpty,
            components.percentEncodedUser == nil, components.percentEncodedPassword == nil
        else { return nil }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return Place(scheme: scheme, host: host, port: components.port ?? (scheme == "https" ? 443 : 80), path: path)
    }

    /// Whether a server might resolve `path` to a place outside where it seems to be.
    static func mayEscape(_ path: String) -> Bool {
        let lowered = path.lowercased()
        // (The standard library's split, not Foundation's contains: web views link no Foundation.)
        if ["%2f", "%5c"].contains(where: { lowered.split(separator: $0, omittingEmptySubsequences: false).count > 1 }) {
            return true
        }
        // A dot segment, its dots written plainly or as %2e, path parameters after it or not: Tomcat, Jetty
        // and Spring drop what follows ";" (also written %3b) in a segment, and resolve "..;x" as "..".
        return path.split(separator: "/", omittingEmptySubsequences: false).contains { segment in
            let plain = segment.lowercased().split(separator: "%2e", omittingEmptySubsequences: false)
                .joined(separator: ".")
            let name = plain.split(separator: "%3b", omittingEmptySubsequences: false)[0]
                .split(separator: ";", omittingEmptySubsequences: false)[0]
            return name == "." || name == ".."
        }
    }
}
