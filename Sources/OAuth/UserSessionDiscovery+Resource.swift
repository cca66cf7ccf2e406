#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink

/// A protected resource's metadata (RFC 9728 §2): the members tokend uses.
struct ResourceMetadata: Sendable, Equatable {
    var resource: String
    var authorizationServers: [String]
    var scopesSupported: [String]

    /// The document at `url`, checked to speak for `asked` (RFC 9728 §3.3):
    /// metadata for another resource would send the user's login elsewhere.
    static func parse(_ body: [UInt8], asked: URL, from url: URL) throws(DiscoveryFailed) -> ResourceMetadata {
        let fail = { (reason: String) in
            DiscoveryFailed(step: "resource-metadata", url: url.absoluteString, status: 200, reason: reason)
        }
        guard let document = providerObject(body) else { throw fail("the metadata is not a JSON object") }
        guard let resource = document["resource"]?.stringValue else { throw fail("the metadata has no \"resource\"") }
        guard sameResource(resource, asked.absoluteString) else {
            throw fail(
                "the metadata is for resource \"\(TokenResponse.sanitize(resource))\", not \"\(asked.absoluteString)\" (RFC 9728 §3.3)")
        }
        let servers = strings(document["authorization_servers"])
        guard !servers.isEmpty else { throw fail("the metadata names no authorization_servers") }
        return ResourceMetadata(resource: resource, authorizationServers: servers, scopesSupported: strings(document["scopes_supported"]))
    }

    static func strings(_ value: JSONValue?) -> [String] {
        (value?.arrayValue ?? []).compactMap(\.stringValue)
    }

    /// The same resource: scheme and host in any case, the default port
    /// written or not, a trailing slash or not (servers differ on it; it
    /// names no other resource). Path and query are otherwise exact.
    static func sameResource(_ a: String, _ b: String) -> Bool {
        guard let first = canonical(a), let second = canonical(b) else { return false }
        return first == second
    }

    static func canonical(_ text: String) -> String? {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            let host = components.host?.lowercased(), components.fragment == nil
        else { return nil }
        let defaultPort = scheme == "https" ? 443 : scheme == "http" ? 80 : nil
        let port = components.port.flatMap { $0 == defaultPort ? nil : ":\($0)" } ?? ""
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        let query = components.percentEncodedQuery.map { "?\($0)" } ?? ""
        return "\(scheme)://\(host)\(port)\(path)\(query)"
    }

    /// RFC 9728 §3.1: the well-known path inserted before the resource's
    /// path, then (as MCP clients do) at the root.
    static func wellKnownURLs(for resource: URL) -> [URL] {
        guard var components = URLComponents(url: resource, resolvingAgainstBaseURL: false) else { return [] }
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        components.query = nil
        components.fragment = nil
        var urls: [URL] = []
        for suffix in [path, ""] {
            var candidate = components
            candidate.percentEncodedPath = "/.well-known/oauth-protected-resource" + suffix
            if let url = candidate.url, !urls.contains(url) { urls.append(url) }
        }
        return urls
    }
}

extension UserSessionDiscovery {
    /// The resource's metadata: where its challenge says, else at RFC 9728's well-known paths.
    static func resourceMetadata(
        for resource: URL, at advertised: String?, policy: OutboundPolicy, until deadline: ContinuousClock.Instant
    ) async throws -> ResourceMetadata {
        let candidates: [URL]
        if let advertised {
            guard let url = URL(string: advertised, relativeTo: resource)?.absoluteURL, url.host != nil else {
                throw DiscoveryFailed(
                    step: "challenge", url: resource.absoluteString, status: 401,
                    reason: "its resource_metadata \"\(TokenResponse.sanitize(advertised))\" is not a URL")
            }
            candidates = [url]
        } else {
            candidates = ResourceMetadata.wellKnownURLs(for: resource)
        }
        var last: (url: URL, status: Int)? = nil
        for candidate in candidates {
            let (answer, url) = try await policy.get(candidate, step: "resource-metadata", until: deadline)
            guard answer.status == 200 else {
                last = (url, answer.status)
                continue
            }
            return try ResourceMetadata.parse(answer.body, asked: resource, from: url)
        }
        let reason = advertised == nil
            ? "\(resource.absoluteString) answered no 401 Bearer challenge with resource_metadata, and no RFC 9728 metadata is at its well-known paths"
            : "the metadata its challenge names is not there"
        throw DiscoveryFailed(
            step: "resource-metadata", url: last?.url.absoluteString ?? resource.absoluteString, status: last?.status, reason: reason)
    }
}
