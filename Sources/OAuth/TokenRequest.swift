#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// How the client authenticates to the provider (RFC 6749 §2.3, RFC 7523 §2.2);
/// the raw values are the configuration's `client-auth` settings.
public enum ClientAuthentication: String, Sendable, CaseIterable {
    /// HTTP Basic with the form-encoded client id and secret.
    case basic
    /// client_id and client_secret in the request body.
    case post
    /// A public client: client_id in the body, no secret.
    case none
    /// client_id and an assertion signed with the client's private key (private_key_jwt).
    case privateKeyJWT = "private-key-jwt"
    /// client_id and an assertion signed HS256 with the client secret (client_secret_jwt).
    case secretJWT = "secret-jwt"
}

public struct ClientCredentials: Sendable {
    public var clientID: String
    public var secret: Secret?
    public var authentication: ClientAuthentication
    /// The private key of `privateKeyJWT`.
    public var key: ClientKey?

    public init(clientID: String, secret: Secret?, authentication: ClientAuthentication, key: ClientKey? = nil) {
        self.clientID = clientID
        self.secret = secret
        self.authentication = authentication
        self.key = key
    }
}

/// A form POST to the token or revocation endpoint.
public struct FormRequest: Sendable {
    public var headers: [(String, String)]
    /// The encoded body; contains secrets, never log it.
    public var body: Secret
    /// The secrets it carries (refresh token, code, verifier, client
    /// secret...): whatever the provider answers is redacted of them.
    public var secrets: [String] = []

    /// What every answer to this request is cleaned with.
    public var redactor: Redactor { Redactor(secrets) }

    static let secretFields: Set<String> = [
        "refresh_token", "client_secret", "code", "code_verifier", "device_code", "token",
    ]

    /// `grant_type=refresh_token` (RFC 6749 §6).
    /// `resources`: RFC 8707 resource indicators, one `resource` field each.
    public static func refresh(
        refreshToken: Secret, scope: String?, resources: [String] = [], credentials: ClientCredentials
    ) -> FormRequest {
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.reveal())]
        if let scope { fields.append(("scope", scope)) }
        fields += resources.map { ("resource", $0) }
        return build(fields, credentials)
    }

    /// The authorization code with its PKCE verifier (RFC 6749 §4.1.3, RFC 7636 §4.5).
    public static func authorizationCode(
        code: Secret, redirectURI: String, verifier: Secret, resources: [String] = [], credentials: ClientCredentials
    ) -> FormRequest {
        build(
            [("grant_type", "authorization_code"), ("code", code.reveal()), ("redirect_uri", redirectURI),
             ("code_verifier", verifier.reveal())] + resources.map { ("resource", $0) }, credentials,
            clientIDAlways: true)
    }

    /// Starts a device login (RFC 8628 §3.1).
    public static func deviceAuthorization(
        scope: String?, resources: [String] = [], credentials: ClientCredentials
    ) -> FormRequest {
        build((scope.map { [("scope", $0)] } ?? []) + resources.map { ("resource", $0) }, credentials, clientIDAlways: true)
    }

    /// Asks whether the user has approved the device login (RFC 8628 §3.4).
    public static func deviceCode(_ deviceCode: Secret, resources: [String] = [], credentials: ClientCredentials) -> FormRequest {
        build(
            [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode.reveal())]
                + resources.map { ("resource", $0) },
            credentials, clientIDAlways: true)
    }

    /// Token revocation (RFC 7009 §2.1).
    /// `emptySecret`: a public client names an empty client_secret too (for servers that require the field).
    public static func revoke(token: Secret, hint: String, credentials: ClientCredentials, emptySecret: Bool = false) -> FormRequest {
        build([("token", token.reveal()), ("token_type_hint", hint)] + (emptySecret ? [("client_secret", "")] : []), credentials)
    }

    /// `clientIDAlways`: name the client in the body also with Basic authentication
    /// (the code and device grants identify the client that began them).
    static func build(
        _ fields: [(String, String)], _ credentials: ClientCredentials, clientIDAlways: Bool = false
    ) -> FormRequest {
        var fields = fields
        var headers = [
            ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"),
        ]
        switch credentials.authentication {
        case .basic:
            let user = formEncode(credentials.clientID)
            let password = formEncode(credentials.secret?.reveal() ?? "")
            let token = Data("\(user):\(password)".utf8).base64EncodedString()
            headers.append(("Authorization", "Basic \(token)"))
            if clientIDAlways { fields.append(("client_id", credentials.clientID)) }
        case .post:
            fields.append(("client_id", credentials.clientID))
            if let secret = credentials.secret { fields.append(("client_secret", secret.reveal())) }
        case .none, .privateKeyJWT, .secretJWT:
            // The assertion is made when the request is sent (HTTPTokenEndpoint.post): each one is used once.
            fields.append(("client_id", credentials.clientID))
        }
        let body = encode(fields)
        var secrets = fields.filter { secretFields.contains($0.0) && !$0.1.isEmpty }.map(\.1)
        if let secret = credentials.secret?.reveal(), !secret.isEmpty { secrets.append(secret) }
        return FormRequest(headers: headers, body: Secret(body), secrets: secrets)
    }

    /// `name=value&...`, each form-encoded.
    static func encode(_ fields: [(String, String)]) -> String {
        fields.map { "\(formEncode($0.0))=\(formEncode($0.1))" }.joined(separator: "&")
    }

    /// application/x-www-form-urlencoded: every byte but unreserved characters escaped.
    static func formEncode(_ value: String) -> String { value.percentEncoded }
}
