#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPExchange
import Varlink

/// A client tokend registered for a user's session (RFC 7591 §3.2.1).
public struct RegisteredClient: Sendable, Equatable, Codable {
    public var clientID: String
    public var clientSecret: String?
    /// RFC 7592: what reads or deletes the registration, when the server offers that.
    public var registrationAccessToken: String?
    public var registrationClientURI: String?
    public var redirectURI: String

    public init(
        clientID: String, clientSecret: String? = nil, registrationAccessToken: String? = nil,
        registrationClientURI: String? = nil, redirectURI: String
    ) {
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.registrationAccessToken = registrationAccessToken
        self.registrationClientURI = registrationClientURI
        self.redirectURI = redirectURI
    }
}

/// Dynamic client registration (RFC 7591), through the user's OutboundPolicy.
public enum ClientRegistration {
    /// RFC 7591: a public client (token_endpoint_auth_method none, grant_types authorization_code + refresh_token,
    /// response_types code, redirect_uris [redirectURI], client_name). Throws AddressRefused or DiscoveryFailed(step: "registration").
    public static func register(
        at endpoint: URL, redirectURI: String, clientName: String, scope: String?, policy: OutboundPolicy, timeout: Duration
    ) async throws -> RegisteredClient {
        try policy.precheck(endpoint)
        var request = HTTPRequest(url: endpoint.absoluteString, method: "POST")
        request.addHeader(name: "Content-Type", value: "application/json")
        request.addHeader(name: "Accept", value: "application/json")
        request.body = JSONWriter.bytes(metadata(redirectURI: redirectURI, clientName: clientName, scope: scope))
        // A POST is never re-sent elsewhere: a redirect is the server's failure.
        let answer = try await policy.exchange(request, step: "registration", until: ContinuousClock.now + timeout)
        return try parse(status: answer.status, body: answer.body, redirectURI: redirectURI, from: endpoint)
    }

    /// The client metadata sent (RFC 7591 §2).
    static func metadata(redirectURI: String, clientName: String, scope: String?) -> JSONValue {
        var members: JSONObject = [
            "client_name": .string(clientName),
            "redirect_uris": [.string(redirectURI)],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        ]
        if let scope { members["scope"] = .string(scope) }
        return .object(members)
    }

    /// The server's answer (RFC 7591 §3.2): 201 (200 taken too) with a
    /// client_id, or an error (§3.2.2) said with its code and description.
    static func parse(status: Int, body: [UInt8], redirectURI: String, from endpoint: URL) throws(DiscoveryFailed)
        -> RegisteredClient
    {
        let fail = { (reason: String) in
            DiscoveryFailed(step: "registration", url: endpoint.absoluteString, status: status, reason: reason)
        }
        let document = providerObject(body)
        guard status == 201 || status == 200 else {
            if let code = document?["error"]?.stringValue {
                let described = document?["error_description"]?.stringValue.map { ": \($0)" } ?? ""
                throw fail("the server refused the registration: \(TokenResponse.sanitize(code + described))")
            }
            throw fail("the server did not register the client")
        }
        guard let document else { throw fail("the answer is not a JSON object") }
        guard let clientID = document["client_id"]?.stringValue, !clientID.isEmpty else {
            throw fail("the answer has no client_id")
        }
        // A server may change the metadata it was sent (§3.2.1); a login at another redirect URI could not finish.
        if let registered = document["redirect_uris"]?.arrayValue, !registered.contains(.string(redirectURI)) {
            throw fail("the server registered other redirect URIs than \(redirectURI)")
        }
        return RegisteredClient(
            clientID: clientID, clientSecret: document["client_secret"]?.stringValue,
            registrationAccessToken: document["registration_access_token"]?.stringValue,
            registrationClientURI: document["registration_client_uri"]?.stringValue, redirectURI: redirectURI)
    }
}
