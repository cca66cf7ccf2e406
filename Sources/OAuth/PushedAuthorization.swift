import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// Pushed authorization requests (RFC 9126): the authorization request goes
/// to the provider over a client-authenticated POST, and the browser carries
/// only the client id and the `request_uri` the provider gave for it, so
/// nothing the browser or its extensions see can be altered or replayed
/// against another client.
extension AuthorizationCodeLogin {
    /// The authorization request's parameters (RFC 6749 §4.1.1, RFC 7636 §4.3,
    /// OpenID Connect Core §3.1.2.1), in the order they are sent.
    /// `resources`: RFC 8707 resource indicators, one `resource` parameter each.
    public func parameters(clientID: String, scope: String?, resources: [String] = []) -> [(String, String)] {
        var fields = [
            ("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirectURI), ("state", state),
            ("code_challenge", Self.challenge(for: verifier)), ("code_challenge_method", "S256"),
        ]
        if let scope { fields.append(("scope", scope)) }
        if scope.map(Self.asksForOpenID) ?? false { fields.append(("nonce", nonce)) }
        fields += resources.map { ("resource", $0) }
        return fields
    }
}

extension FormRequest {
    /// The authorization request, pushed (RFC 9126 §2.1). The client id goes in
    /// the body with every method of client authentication: it is one of the
    /// request's own parameters.
    public static func pushedAuthorization(
        _ login: AuthorizationCodeLogin, scope: String?, resources: [String] = [], credentials: ClientCredentials
    ) -> FormRequest {
        let fields = login.parameters(clientID: credentials.clientID, scope: scope, resources: resources)
            .filter { $0.0 != "client_id" }
        return build(fields, credentials, clientIDAlways: true)
    }
}

/// The pushed authorization endpoint's answer (RFC 9126 §2.2).
public struct PushedAuthorization: Sendable, Equatable {
    /// A reference to the pushed request, for the browser (`urn:ietf:params:oauth:request_uri:...`).
    public var requestURI: String
    public var expiresIn: Int

    /// `redactor` holds the request's secrets: the provider's text is cleaned of them.
    public static func parse(status: Int, body: [UInt8], redactor: Redactor) throws(TokenEndpointError)
        -> PushedAuthorization
    {
        let json = providerObject(body)
        if let code = json?["error"]?.stringValue {
            let description = json?["error_description"]?.stringValue.map { ": \(redactor.clean($0))" } ?? ""
            let reason = "the pushed authorization request endpoint answered \(redactor.clean(code))\(description)"
            // The client, the redirect URI or the scope is refused: a configuration problem, retrying cannot help.
            if ["invalid_client", "unauthorized_client", "invalid_scope", "invalid_request", "access_denied"].contains(code) {
                throw .rejected(code: code, reason: reason)
            }
            throw .transient(reason, code: code)
        }
        // 201 Created, §2.2; some servers answer 200.
        guard (200..<300).contains(status), let json else {
            throw .transient("the pushed authorization request endpoint answered HTTP \(status)")
        }
        guard let requestURI = json["request_uri"]?.stringValue, !requestURI.isEmpty,
            requestURI.utf8.count <= 2048, !requestURI.contains(where: { $0.isWhitespace || $0.isNewline })
        else {
            throw .transient("the pushed authorization request endpoint's answer has no usable request_uri")
        }
        return PushedAuthorization(requestURI: requestURI, expiresIn: json["expires_in"]?.lenientInt ?? 60)
    }

    /// What the browser opens (§4): the authorization endpoint with only
    /// `client_id` and `request_uri`.
    public func browserURL(endpoint: URL, clientID: String) -> URL? {
        guard var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false) else { return nil }
        components.queryItems = (components.queryItems ?? []) + [
            URLQueryItem(name: "client_id", value: clientID), URLQueryItem(name: "request_uri", value: requestURI),
        ]
        // '+' is a space in form-encoded queries: encode it so the server reads it literally.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacing("+", with: "%2B")
        return components.url
    }
}

extension HTTPTokenEndpoint {
    /// The authorization URL, pushed first when the session or the provider
    /// asks for it: the browser then carries only `client_id` and `request_uri`.
    public func beginAuthorization(for login: AuthorizationCodeLogin) async throws(TokenEndpointError) -> URL {
        try await beginAuthorization(for: login, proofKey: nil)
    }

    public func beginAuthorization(for login: AuthorizationCodeLogin, proofKey: (any ProofKey)?) async throws(TokenEndpointError)
        -> URL
    {
        try checkRedirect(login)
        let endpoints = current
        guard pushesAuthorization || endpoints.requiresPushedAuthorization else { return try authorizationURL(for: login) }
        guard let authorization = endpoints.authorization else { throw unknownEndpoint("authorization") }
        guard let pushURL = endpoints.pushedAuthorization else {
            throw .transient("pushed-authorization is set, and the provider names no pushed_authorization_request_endpoint")
        }
        let form = FormRequest.pushedAuthorization(login, scope: scope, resources: resources, credentials: credentials)
        let pushed: PushedAuthorization
        do {
            let answer = try await post(form, to: pushURL, proofKey: proofKey)
            pushed = try PushedAuthorization.parse(status: answer.status, body: answer.body, redactor: form.redactor)
        } catch {
            throw error.redacting(form.redactor)
        }
        guard let url = pushed.browserURL(endpoint: authorization, clientID: credentials.clientID) else {
            throw .transient("the authorization endpoint \(authorization) cannot take query parameters")
        }
        return url
    }
}
