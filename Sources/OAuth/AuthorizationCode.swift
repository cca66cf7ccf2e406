import Crypto
import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// One authorization-code login's secrets (RFC 7636 PKCE with S256, `state`,
/// OpenID Connect `nonce`). Made and kept by tokend; only the challenge,
/// `state` and `nonce` go out, in the authorization URL.
public struct AuthorizationCodeLogin: Sendable {
    public let verifier: Secret
    public let state: String
    public let nonce: String
    public let redirectURI: String

    public init(redirectURI: String, verifier: Secret = Secret(randomToken()), state: String = randomToken(),
                nonce: String = randomToken())
    {
        self.verifier = verifier
        self.state = state
        self.nonce = nonce
        self.redirectURI = redirectURI
    }

    /// BASE64URL(SHA256(verifier)), RFC 7636 §4.2.
    public static func challenge(for verifier: Secret) -> String {
        base64URL(Data(SHA256.hash(data: Data(verifier.reveal().utf8))))
    }

    /// The URL the user opens: the authorization endpoint with the request's parameters.
    public func authorizationURL(endpoint: URL, clientID: String, scope: String?, resources: [String] = []) -> URL? {
        guard var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false) else { return nil }
        components.queryItems = (components.queryItems ?? [])
            + parameters(clientID: clientID, scope: scope, resources: resources).map { URLQueryItem(name: $0.0, value: $0.1) }
        // '+' is a space in form-encoded queries: encode it so the server reads it literally.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacing("+", with: "%2B")
        return components.url
    }

    public static func asksForOpenID(_ scope: String) -> Bool {
        scope.split(separator: " ").contains("openid")
    }

    /// The code from the redirect the browser was sent to, after checking that
    /// it answers this request: same redirect target, same `state`, and (RFC
    /// 9207) the expected `iss` when the server sends one or promised to. A
    /// session configured without an issuer has nothing to compare `iss` with.
    public func code(fromCallback callback: String, issuer: String?, issRequired: Bool) throws(CallbackError) -> Secret {
        guard let url = URLComponents(string: callback), let expected = URLComponents(string: redirectURI) else {
            throw .invalid("the callback URL cannot be parsed")
        }
        guard url.scheme == expected.scheme, url.host == expected.host, url.path == expected.path,
            expected.port == nil || url.port == expected.port
        else {
            throw .invalid("the callback URL is not the redirect URI this login was begun with")
        }
        var fields: [String: String] = [:]
        for item in url.queryItems ?? [] {
            guard fields[item.name] == nil else { throw .invalid("the callback repeats \"\(item.name)\"") }
            fields[item.name] = item.value ?? ""
        }
        guard let received = fields["state"], constantTimeEqual(received, state) else {
            throw .invalid("the callback's state does not match this login (a stale or forged redirect)")
        }
        if let iss = fields["iss"] {
            if let issuer, iss != issuer {
                throw .invalid("the callback comes from issuer \"\(TokenResponse.sanitize(iss))\", not this session's")
            }
        } else if issRequired {
            throw .invalid("the server promised an iss parameter (RFC 9207) and the callback has none")
        }
        if let error = fields["error"] {
            let description = fields["error_description"].map { ": \(TokenResponse.sanitize($0))" } ?? ""
            throw .denied(code: TokenResponse.sanitize(error), reason: "the server answered \(TokenResponse.sanitize(error))\(description)")
        }
        guard let code = fields["code"], !code.isEmpty else { throw .invalid("the callback carries no code") }
        return Secret(code)
    }
}

/// Why a callback was not accepted.
public enum CallbackError: Error, Sendable, Equatable {
    /// Not an answer to this request; the login stays pending.
    case invalid(String)
    /// The server (or the user) refused: `error=` in the callback.
    case denied(code: String, reason: String)
}

/// 32 random bytes, base64url without padding (43 characters, RFC 7636 §4.1).
public func randomToken() -> String {
    var generator = SystemRandomNumberGenerator()
    return base64URL(Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }))
}

func base64URL(_ data: Data) -> String { Base64URL.encode(data) }

func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let (x, y) = (Array(a.utf8), Array(b.utf8))
    guard x.count == y.count else { return false }
    return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
}
