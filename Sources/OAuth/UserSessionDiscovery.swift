#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a user session learns about its server before its first login.
public struct DiscoveredServer: Sendable {
    public var issuer: String
    /// What the login asks for (RFC 8707), the resource's canonical URI from its metadata.
    public var resources: [String]
    /// From the 401 challenge's scope=, else the resource metadata's scopes_supported.
    public var scope: String?
    public var registrationEndpoint: URL?
    /// The authorization server's metadata (RFC 8414 or OpenID).
    public var metadata: ProviderMetadata

    public init(issuer: String, resources: [String], scope: String?, registrationEndpoint: URL?, metadata: ProviderMetadata) {
        self.issuer = issuer
        self.resources = resources
        self.scope = scope
        self.registrationEndpoint = registrationEndpoint
        self.metadata = metadata
    }
}

/// Discovery for a session a user adds (MCP authorization 2025-06-18; RFCs
/// 9728, 8414, 8707), every request through the user's OutboundPolicy.
public enum UserSessionDiscovery {
    /// issuer given: read its metadata (RFC 8414 /.well-known/oauth-authorization-server, else OpenID /.well-known/openid-configuration).
    /// No issuer: resources[0] is requested (an MCP server answers 401 with WWW-Authenticate: Bearer resource_metadata="..."),
    /// else RFC 9728's well-known path is tried; the protected-resource metadata names authorization_servers.
    /// Throws AddressRefused or DiscoveryFailed (naming the step, URL and status); nothing else.
    /// `timeout` bounds the whole discovery, every request and redirect included.
    public static func discover(
        issuer: String?, resources: [String], scope: String?, policy: OutboundPolicy, timeout: Duration
    ) async throws -> DiscoveredServer {
        let deadline = ContinuousClock.now + timeout
        if let issuer {
            try admit(issuer, policy: policy)
            let (metadata, registration) = try await serverMetadata(issuer: issuer, policy: policy, until: deadline)
            return DiscoveredServer(
                issuer: issuer, resources: resources, scope: scope, registrationEndpoint: registration, metadata: metadata)
        }
        guard let first = resources.first else {
            throw DiscoveryFailed(step: "challenge", url: "", status: nil, reason: "neither an issuer nor a resource was given")
        }
        guard let resourceURL = URL(string: first), resourceURL.host != nil else {
            throw DiscoveryFailed(step: "challenge", url: first, status: nil, reason: "the resource is not an absolute URL")
        }
        try policy.precheck(resourceURL)
        let challenge = try await challenge(of: resourceURL, policy: policy, until: deadline)
        let resource = try await resourceMetadata(
            for: resourceURL, at: challenge?.parameters["resource_metadata"], policy: policy, until: deadline)
        guard let issuer = resource.authorizationServers.first(where: policy.admits(issuer:)) else {
            let named = resource.authorizationServers.first ?? "none"
            throw AddressRefused(
                url: named, address: nil,
                reason: "the resource's authorization server is not among the [user-sessions] issuers patterns")
        }
        let (metadata, registration) = try await serverMetadata(issuer: issuer, policy: policy, until: deadline)
        let scopes = resource.scopesSupported.isEmpty ? nil : resource.scopesSupported.joined(separator: " ")
        return DiscoveredServer(
            issuer: issuer, resources: [resource.resource] + resources.dropFirst(),
            scope: scope ?? challenge?.parameters["scope"] ?? scopes, registrationEndpoint: registration, metadata: metadata)
    }

    static func admit(_ issuer: String, policy: OutboundPolicy) throws(AddressRefused) {
        guard policy.admits(issuer: issuer) else {
            throw AddressRefused(url: issuer, address: nil, reason: "the issuer is not among the [user-sessions] issuers patterns")
        }
    }

    /// The resource's 401 Bearer challenge, nil when it answers otherwise (then
    /// RFC 9728's well-known path is tried). What the resource says is
    /// only read: no token is sent.
    static func challenge(of resource: URL, policy: OutboundPolicy, until deadline: ContinuousClock.Instant) async throws
        -> AuthenticationChallenge?
    {
        let (answer, _) = try await policy.get(
            resource, step: "challenge", accept: "application/json, text/event-stream", until: deadline)
        guard answer.status == 401, let bearer = AuthenticationChallenge.bearer(in: answer.headers("WWW-Authenticate")),
            bearer.parameters["resource_metadata"] != nil
        else { return nil }
        return bearer
    }

    /// The authorization server's metadata: RFC 8414 first (the well-known
    /// path inserted before the issuer's path), then OpenID Connect's. A
    /// document must name the issuer asked (RFC 8414 §3.3), and the server
    /// must take PKCE S256 when it lists its methods.
    static func serverMetadata(issuer: String, policy: OutboundPolicy, until deadline: ContinuousClock.Instant)
        async throws -> (ProviderMetadata, URL?)
    {
        let candidates = serverMetadataURLs(issuer: issuer)
        guard !candidates.isEmpty else {
            throw DiscoveryFailed(step: "server-metadata", url: issuer, status: nil, reason: "the issuer is not a URL")
        }
        var last: (url: URL, status: Int)? = nil
        for candidate in candidates {
            let (answer, url) = try await policy.get(candidate, step: "server-metadata", until: deadline)
            guard answer.status == 200 else {
                last = (url, answer.status)
                continue
            }
            return try checkedServerMetadata(answer.body, issuer: issuer, from: url, policy: policy)
        }
        throw DiscoveryFailed(
            step: "server-metadata", url: last?.url.absoluteString ?? issuer, status: last?.status,
            reason: "neither RFC 8414 nor OpenID Connect metadata was found for issuer \(issuer)")
    }

    static func serverMetadataURLs(issuer: String) -> [URL] {
        guard var components = URLComponents(string: issuer), components.host != nil else { return [] }
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        components.query = nil
        components.fragment = nil
        var urls: [URL] = []
        for (wellKnown, inserted) in [("oauth-authorization-server", true), ("openid-configuration", true), ("openid-configuration", false)] {
            var candidate = components
            candidate.percentEncodedPath = inserted ? "/.well-known/\(wellKnown)\(path)" : "\(path)/.well-known/\(wellKnown)"
            if let url = candidate.url, !urls.contains(url) { urls.append(url) }
        }
        return urls
    }

    static func checkedServerMetadata(_ body: [UInt8], issuer: String, from url: URL, policy: OutboundPolicy) throws
        -> (ProviderMetadata, URL?)
    {
        let fail = { (reason: String) in
            DiscoveryFailed(step: "server-metadata", url: url.absoluteString, status: 200, reason: reason)
        }
        let metadata: ProviderMetadata
        do {
            metadata = try ProviderMetadata.parse(body, expectedIssuer: issuer)
            try HTTPTokenEndpoint.checkSafe(metadata)
        } catch {
            throw fail(error.description)
        }
        if let methods = metadata.codeChallengeMethods, !methods.contains("S256") {
            throw fail("the server does not take PKCE S256 (code_challenge_methods_supported: \(methods.joined(separator: ", ")))")
        }
        guard let token = metadata.tokenEndpoint else { throw fail("the metadata names no token_endpoint") }
        var registration: URL? = nil
        if let text = providerObject(body)?["registration_endpoint"]?.stringValue {
            guard let endpoint = URL(string: text), endpoint.host != nil else {
                throw fail("its registration_endpoint is not a URL")
            }
            registration = endpoint
        }
        // The endpoints tokend itself connects to: refused now rather than at the first refresh.
        let used = [token, metadata.revocationEndpoint, metadata.deviceAuthorizationEndpoint, metadata.pushedAuthorizationEndpoint,
            metadata.userinfoEndpoint, metadata.jwksURI, metadata.introspectionEndpoint, registration]
        for endpoint in used.compactMap({ $0 }) { try policy.precheck(endpoint) }
        return (metadata, registration)
    }
}
