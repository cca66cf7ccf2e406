#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What an authorization server publishes about itself (OpenID Connect
/// Discovery 1.0 §3, RFC 8414 §2): the members tokend uses.
public struct ProviderMetadata: Sendable, Equatable, Codable {
    public var issuer: String
    public var tokenEndpoint: URL?
    public var revocationEndpoint: URL?
    public var authorizationEndpoint: URL?
    public var deviceAuthorizationEndpoint: URL?
    public var userinfoEndpoint: URL?
    public var jwksURI: URL?
    public var codeChallengeMethods: [String]?
    /// RFC 9207: the server adds `iss` to authorization responses.
    public var issParameterSupported: Bool?
    /// RFC 9126 §5.
    public var pushedAuthorizationEndpoint: URL?
    public var requiresPushedAuthorization: Bool?
    /// RFC 9449 §5.1: the algorithms the server takes DPoP proofs in.
    public var dpopSigningAlgValues: [String]?
    /// RFC 7662 token introspection (RFC 8414 §2).
    public var introspectionEndpoint: URL?
    /// RFC 8705 §5: where clients using mutual TLS reach the endpoints instead.
    public var mtlsEndpointAliases: EndpointAliases?

    enum CodingKeys: String, CodingKey {
        case issuer
        case tokenEndpoint = "token_endpoint"
        case revocationEndpoint = "revocation_endpoint"
        case authorizationEndpoint = "authorization_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint"
        case userinfoEndpoint = "userinfo_endpoint"
        case jwksURI = "jwks_uri"
        case codeChallengeMethods = "code_challenge_methods_supported"
        case issParameterSupported = "authorization_response_iss_parameter_supported"
        case pushedAuthorizationEndpoint = "pushed_authorization_request_endpoint"
        case requiresPushedAuthorization = "require_pushed_authorization_requests"
        case dpopSigningAlgValues = "dpop_signing_alg_values_supported"
        case introspectionEndpoint = "introspection_endpoint"
        case mtlsEndpointAliases = "mtls_endpoint_aliases"
    }

    public init(issuer: String) {
        self.issuer = issuer
    }

    /// Parses a discovery document and checks that it speaks for `issuer`
    /// (OpenID Connect Discovery §4.3, RFC 8414 §3.3): an attacker's document
    /// must not redirect tokens elsewhere.
    public static func parse(_ body: [UInt8], expectedIssuer: String) throws(DiscoveryError) -> ProviderMetadata {
        let metadata: ProviderMetadata
        do {
            metadata = try JSONDecoder().decode(ProviderMetadata.self, from: Data(body))
        } catch {
            throw DiscoveryError("the discovery document is not valid JSON with an \"issuer\" member")
        }
        guard metadata.issuer == expectedIssuer else {
            throw DiscoveryError(
                "the discovery document names issuer \"\(TokenResponse.sanitize(metadata.issuer))\", not the configured \"\(expectedIssuer)\"")
        }
        return metadata
    }

    /// The document as JSON, to keep with the session state.
    public func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    /// A document kept by `encoded()`; nil when it cannot be read.
    public static func decode(_ text: String) -> ProviderMetadata? {
        try? JSONDecoder().decode(ProviderMetadata.self, from: Data(text.utf8))
    }

    /// Where to look, in order: OpenID Connect's `ISSUER/.well-known/openid-configuration`,
    /// then RFC 8414's `/.well-known/oauth-authorization-server` inserted before the issuer's path.
    public static func discoveryURLs(issuer: String) -> [URL] {
        var trimmed = issuer
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        var urls: [URL] = []
        if let oidc = URL(string: trimmed + "/.well-known/openid-configuration") { urls.append(oidc) }
        if var components = URLComponents(string: trimmed) {
            let path = components.path == "/" ? "" : components.path
            components.path = "/.well-known/oauth-authorization-server" + path
            if let rfc8414 = components.url { urls.append(rfc8414) }
        }
        return urls
    }
}

/// A document's `mtls_endpoint_aliases` (RFC 8705 §5): endpoint URLs by
/// their metadata name. A member that is not a URL string is left out
/// rather than failing the whole document.
public struct EndpointAliases: Sendable, Equatable, Codable {
    public var urls: [String: URL]

    public init(_ urls: [String: URL]) { self.urls = urls }

    struct Name: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let members = try decoder.container(keyedBy: Name.self)
        var urls: [String: URL] = [:]
        for name in members.allKeys {
            if let text = try? members.decode(String.self, forKey: name), let url = URL(string: text) { urls[name.stringValue] = url }
        }
        self.urls = urls
    }

    public func encode(to encoder: any Encoder) throws {
        var members = encoder.container(keyedBy: Name.self)
        for (name, url) in urls { try members.encode(url.absoluteString, forKey: Name(stringValue: name)) }
    }
}

/// Why discovery did not give a usable document; never contains a secret.
public struct DiscoveryError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The endpoints a session uses: configured ones win over discovered ones.
public struct ProviderEndpoints: Sendable, Equatable {
    public var issuer: String?
    public var token: URL?
    public var revocation: URL?
    public var authorization: URL?
    public var deviceAuthorization: URL?
    public var userinfo: URL?
    public var jwks: URL?
    public var issParameterSupported = false
    public var pushedAuthorization: URL?
    /// The provider accepts no authorization request that was not pushed (RFC 9126 §5).
    public var requiresPushedAuthorization = false
    /// RFC 7662: where tokend asks which audience a token it received has.
    public var introspection: URL?
    /// RFC 8705 §5: the provider's endpoints under the names clients using mutual TLS reach them by
    /// (its userinfo endpoint's alias left out: that one is a resource). tokend uses none of them.
    public var mtlsAliases: [URL] = []
    /// A discovery document filled the gaps: an endpoint still missing is one the provider does not have.
    public var discovered = false

    public init(
        issuer: String? = nil, token: URL? = nil, revocation: URL? = nil, authorization: URL? = nil,
        deviceAuthorization: URL? = nil
    ) {
        self.issuer = issuer
        self.token = token
        self.revocation = revocation
        self.authorization = authorization
        self.deviceAuthorization = deviceAuthorization
    }

    /// These endpoints, with the gaps filled from a discovery document.
    public func filled(from metadata: ProviderMetadata) -> ProviderEndpoints {
        var merged = self
        merged.token = token ?? metadata.tokenEndpoint
        merged.revocation = revocation ?? metadata.revocationEndpoint
        merged.authorization = authorization ?? metadata.authorizationEndpoint
        merged.deviceAuthorization = deviceAuthorization ?? metadata.deviceAuthorizationEndpoint
        merged.userinfo = userinfo ?? metadata.userinfoEndpoint
        merged.jwks = jwks ?? metadata.jwksURI
        merged.issParameterSupported = metadata.issParameterSupported ?? false
        merged.pushedAuthorization = pushedAuthorization ?? metadata.pushedAuthorizationEndpoint
        merged.requiresPushedAuthorization = metadata.requiresPushedAuthorization ?? false
        merged.introspection = introspection ?? metadata.introspectionEndpoint
        merged.mtlsAliases = (metadata.mtlsEndpointAliases?.urls ?? [:]).filter { $0.key != "userinfo_endpoint" }
            .sorted { $0.key < $1.key }.map(\.value)
        merged.discovered = true
        return merged
    }
}
