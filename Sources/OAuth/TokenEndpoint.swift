import DPoP
import Deadline
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPExchange
import NIOCore
import Secrets
import Synchronization
import TokendMetrics

/// The authorization server's endpoints, as the broker sees them. The login
/// members have defaults for endpoints that only refresh (test fakes).
public protocol TokenEndpoint: Sendable {
    /// The token endpoint (the request URL for the session's cookies); nil
    /// while discovery has not found it yet.
    var tokenURL: URL? { get }
    /// Exchanges a refresh token, sending `cookieHeader` (when not empty) as the Cookie header.
    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer
    /// The same, asking for a token for `target` (RFC 8707 resources, RFC 6749 §6 scope).
    func refresh(refreshToken: Secret, cookieHeader: String, target: RefreshTarget) async -> RefreshAnswer
    /// Revokes a token (RFC 7009). Throws TokenEndpointError.transient when unreachable.
    func revoke(token: Secret) async throws(TokenEndpointError)

    /// The configured issuer, when endpoints come from discovery.
    var issuer: String? { get }
    /// The login flows the endpoints allow ("device", "browser"); nil while discovery has not succeeded.
    var loginFlows: [String]? { get }
    /// Reads the issuer's discovery document and starts using it.
    func discover() async throws(DiscoveryError) -> ProviderMetadata
    /// Starts using a document kept from an earlier discovery.
    func restore(_ metadata: ProviderMetadata)
    /// Begins a device login (RFC 8628 §3.1).
    func deviceAuthorization() async throws(TokenEndpointError) -> DeviceAuthorization
    /// The URL that begins an authorization-code login in the user's browser.
    func authorizationURL(for login: AuthorizationCodeLogin) throws(TokenEndpointError) -> URL
    /// The same, after pushing the request to the provider when it or the
    /// session asks for that (RFC 9126); what a browser login calls.
    func beginAuthorization(for login: AuthorizationCodeLogin) async throws(TokenEndpointError) -> URL
    /// The same, the pushed request carrying a DPoP proof signed by `proofKey` (RFC 9449 §10.1): the code is bound to it.
    func beginAuthorization(for login: AuthorizationCodeLogin, proofKey: (any ProofKey)?) async throws(TokenEndpointError) -> URL
    /// Redeems a login grant at the token endpoint.
    func redeem(_ grant: LoginGrant, cookieHeader: String) async -> RefreshAnswer
    /// The same with a DPoP proof signed by `proofKey` (RFC 9449): the grant it makes is bound to that key.
    func redeem(_ grant: LoginGrant, cookieHeader: String, proofKey: (any ProofKey)?) async -> RefreshAnswer
    /// Signs the session's refreshes with `key` from now on (nil: no proofs).
    func useProofKey(_ key: (any ProofKey)?)
    /// Who logged in: the verified ID token, else the userinfo endpoint; nil
    /// when the session does not ask for `openid`.
    func identity(of response: TokenResponse, nonce: String?) async throws(IDTokenError) -> Identity?
    /// Which audience an access token tokend received has, as the provider says (see AudienceReading).
    func audience(of accessToken: Secret) async -> AudienceReading
}

/// A grant that starts a session.
public enum LoginGrant: Sendable {
    case authorizationCode(Secret, AuthorizationCodeLogin)
    case deviceCode(Secret)
}

extension TokenEndpoint {
    /// Endpoints that only refresh (test fakes) take every target as the session's own.
    public func refresh(refreshToken: Secret, cookieHeader: String, target: RefreshTarget) async -> RefreshAnswer {
        await refresh(refreshToken: refreshToken, cookieHeader: cookieHeader)
    }
    public var issuer: String? { nil }
    public var loginFlows: [String]? { nil }
    public func discover() async throws(DiscoveryError) -> ProviderMetadata {
        throw DiscoveryError("no issuer is configured")
    }
    public func restore(_ metadata: ProviderMetadata) {}
    public func deviceAuthorization() async throws(TokenEndpointError) -> DeviceAuthorization {
        throw .transient("no device authorization endpoint")
    }
    public func authorizationURL(for login: AuthorizationCodeLogin) throws(TokenEndpointError) -> URL {
        throw .transient("no authorization endpoint")
    }
    public func beginAuthorization(for login: AuthorizationCodeLogin) async throws(TokenEndpointError) -> URL {
        try authorizationURL(for: login)
    }
    public func redeem(_ grant: LoginGrant, cookieHeader: String) async -> RefreshAnswer {
        RefreshAnswer(result: .failure(.transient("this endpoint cannot redeem login grants")))
    }
    public func identity(of response: TokenResponse, nonce: String?) async throws(IDTokenError) -> Identity? { nil }
    public func redeem(_ grant: LoginGrant, cookieHeader: String, proofKey: (any ProofKey)?) async -> RefreshAnswer {
        await redeem(grant, cookieHeader: cookieHeader)
    }
    public func useProofKey(_ key: (any ProofKey)?) {}
    public func beginAuthorization(for login: AuthorizationCodeLogin, proofKey: (any ProofKey)?) async throws(TokenEndpointError)
        -> URL
    {
        try await beginAuthorization(for: login)
    }
    public func audience(of accessToken: Secret) async -> AudienceReading {
        AudienceReading.jwtAudience(of: accessToken.reveal()).map { .stated($0, source: "the token's aud claim") }
            ?? .unknown("the token is not a JWT")
    }
}

/// What one refresh request brought back: the classified result and the
/// answer's Set-Cookie headers, which count whether or not it succeeded.
public struct RefreshAnswer: Sendable {
    public var result: Result<TokenResponse, TokenEndpointError>
    public var setCookie: [String]

    public init(result: Result<TokenResponse, TokenEndpointError>, setCookie: [String] = []) {
        self.result = result
        self.setCookie = setCookie
    }
}

/// The real endpoints over HTTP(S), through HTTPExchange (system trust
/// store). Configured endpoints win; with an issuer, discovery fills the rest.
public final class HTTPTokenEndpoint: TokenEndpoint {
    public let configured: ProviderEndpoints
    public let credentials: ClientCredentials
    public let scope: String?
    /// RFC 8707 resource indicators every login asks for (the session's `resources`).
    public let resources: [String]
    public let timeout: Duration
    /// Push every authorization request (RFC 9126), also where the provider does not require it.
    public let pushesAuthorization: Bool
    /// The one redirect URI browser logins may use (registered exactly at the provider); nil: any loopback one.
    public let redirectURI: String?
    /// Largest body accepted from any endpoint.
    public let maximumBodySize = 256 * 1024
    /// A user's session: every request goes through this guard (see OutboundPolicy). nil: an admin's session.
    public let outbound: OutboundPolicy?
    /// Follows no redirect by itself: a POST carries a refresh token, a code
    /// or a client secret and is never re-sent elsewhere (a 3xx is an error);
    /// a GET follows only the redirects `get` checks.
    let client: HTTPConnector
    let endpoints: Mutex<ProviderEndpoints>
    /// Answers by endpoint and status are counted here.
    let metrics: ProviderMetrics?
    /// The session's DPoP key (see HTTPTokenEndpoint+DPoP); nil: its requests carry no proof.
    let sessionProofKey = Mutex<(any ProofKey)?>(nil)
    /// Servers' DPoP nonces and clocks, shared by every session.
    let proofServers: ProofServers = .shared

    public init(
        endpoints: ProviderEndpoints, credentials: ClientCredentials, scope: String?, timeout: Duration,
        pushesAuthorization: Bool = false, redirectURI: String? = nil, resources: [String] = [],
        client: HTTPConnector = .shared, metrics: ProviderMetrics? = nil,
        outbound: OutboundPolicy? = nil
    ) {
        self.outbound = outbound
        self.metrics = metrics
        self.resources = resources
        self.pushesAuthorization = pushesAuthorization
        self.redirectURI = redirectURI
        self.configured = endpoints
        self.endpoints = Mutex(endpoints)
        self.credentials = credentials
        self.scope = scope
        self.timeout = timeout
        self.client = client
    }

    public var current: ProviderEndpoints { endpoints.withLock { $0 } }
    public var tokenURL: URL? { current.token }
    public var issuer: String? { configured.issuer }
    public var loginFlows: [String]? {
        let current = self.current
        if configured.issuer != nil, !current.discovered { return nil }
        return (current.deviceAuthorization == nil ? [] : ["device"]) + (current.authorization == nil ? [] : ["browser"])
    }

    public func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
        await refresh(refreshToken: refreshToken, cookieHeader: cookieHeader, target: RefreshTarget(scope: scope))
    }

    public func refresh(refreshToken: Secret, cookieHeader: String, target: RefreshTarget) async -> RefreshAnswer {
        let form = FormRequest.refresh(
            refreshToken: refreshToken, scope: target.scope, resources: target.resources, credentials: credentials)
        return await exchange(form, cookieHeader, proofKey: proofKey)
    }

    public func revoke(token: Secret) async throws(TokenEndpointError) {
        guard let revocationURL = current.revocation else { return }
        var form = FormRequest.revoke(token: token, hint: "refresh_token", credentials: credentials)
        var status: Int
        do {
            status = try await post(form, to: revocationURL).status
            // The MCP Python SDK's revocation endpoint (FastMCP's) requires a client_secret field even
            // from a public client, which has none: such a client asks once more with it empty.
            if status == 400, credentials.secret == nil, credentials.authentication == .none {
                form = FormRequest.revoke(token: token, hint: "refresh_token", credentials: credentials, emptySecret: true)
                status = try await post(form, to: revocationURL).status
            }
        } catch {
            throw error.redacting(form.redactor)
        }
        // RFC 7009 §2.2: 200 whether or not the token was valid.
        guard (200..<300).contains(status) else {
            throw .transient("revocation endpoint answered HTTP \(status)")
        }
    }

    /// Posts a grant to the token endpoint and classifies the answer.
    /// With `proofKey`, the request carries a DPoP proof signed by it.
    func exchange(_ form: FormRequest, _ cookieHeader: String, proofKey: (any ProofKey)? = nil) async -> RefreshAnswer {
        guard let tokenURL else { return RefreshAnswer(result: .failure(unknownEndpoint("token"))) }
        var form = form
        if !cookieHeader.isEmpty { form.headers.append(("Cookie", cookieHeader)) }
        do {
            let answer = try await post(form, to: tokenURL, proofKey: proofKey)
            let result = explainingProof(TokenResponse.classify(
                status: answer.status, retryAfterHeader: answer.retryAfter, body: answer.body, redactor: form.redactor),
                url: tokenURL)
            return RefreshAnswer(result: result.mapError { $0.redacting(form.redactor) }, setCookie: answer.setCookie)
        } catch {
            return RefreshAnswer(result: .failure(error.redacting(form.redactor)), setCookie: [])
        }
    }

    /// Which endpoint a request goes to, for the metrics: by the URLs in use.
    func endpoint(of url: String) -> ProviderMetrics.Endpoint {
        let current = self.current
        let known: [(URL?, ProviderMetrics.Endpoint)] = [
            (current.token, .token), (current.revocation, .revocation), (current.deviceAuthorization, .deviceAuthorization),
            (current.pushedAuthorization, .pushedAuthorization), (current.jwks, .jwks), (current.userinfo, .userinfo),
        ]
        if let match = known.first(where: { $0.0?.absoluteString == url }) { return match.1 }
        return url.contains("/.well-known/") ? .discovery : .other
    }

    /// An endpoint the session lacks. While discovery has not succeeded it may
    /// yet appear (an outage); otherwise the provider does not have it, which
    /// no retry changes: code `TokenEndpointError.missingEndpoint`.
    func unknownEndpoint(_ which: String) -> TokenEndpointError {
        if let issuer = configured.issuer, !current.discovered {
            return .transient("discovery from \(issuer) has not succeeded, so the \(which) endpoint is not known yet")
        }
        let source = configured.issuer.map { "neither tokend.toml nor the discovery document of \($0) names one" }
            ?? "tokend.toml names none and no issuer is configured"
        return .transient(
            "this session has no \(which) endpoint: \(source)", code: TokenEndpointError.missingEndpoint)
    }

    struct HTTPAnswer: Sendable {
        var status: Int
        var retryAfter: String?
        var location: String? = nil
        var setCookie: [String]
        var body: [UInt8]
        /// The DPoP-Nonce header (RFC 9449 §8) and the Date header.
        var dpopNonce: String? = nil
        var date: String? = nil
    }

    /// Sends a form, with a new client assertion for `url` when the client authenticates by one.
    func post(_ form: FormRequest, to url: URL) async throws(TokenEndpointError) -> HTTPAnswer {
        var request = HTTPRequest(url: url.absoluteString, method: "POST")
        for (name, value) in form.headers { request.addHeader(name: name, value: value) }
        var body = form.body.reveal()
        if let signer = try credentials.assertionSigner() {
            let fields = try await signer.fields(clientID: credentials.clientID, audience: url)
            body += (body.isEmpty ? "" : "&") + FormRequest.encode(fields)
        }
        request.body = Array(body.utf8)
        return try await send(request)
    }

    func send(_ request: HTTPRequest) async throws(TokenEndpointError) -> HTTPAnswer {
        let deadline = NIODeadline.now() + TimeAmount.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000
            + Int64(timeout.components.attoseconds / 1_000_000_000))
        let (client, maximumBodySize, timeout, prepared) = (self.client, self.maximumBodySize, self.timeout, request)
        let outbound = self.outbound
        let started = ContinuousClock.now
        var status: Int?
        defer {
            metrics?.answered(endpoint(of: request.url), status: status, took: ContinuousClock.now - started)
        }
        do {
            // The deadline covers the whole exchange, the body included: a
            // server that sends its body slowly is cut off like one that hangs.
            let answer = try await within(timeout) {
                if let outbound {
                    return HTTPAnswer(try await outbound.fetch(prepared, deadline: deadline, limit: maximumBodySize))
                }
                return HTTPAnswer(try await client.send(prepared, deadline: deadline, limit: maximumBodySize))
            }
            guard let answer else { throw TokenEndpointError.transient("\(request.url) did not answer within \(timeout.components.seconds) s") }
            status = answer.status
            return answer
        } catch let refusal as AddressRefused {
            throw .transient(refusal.description, code: AddressRefused.code)
        } catch let error as TokenEndpointError {
            throw error
        } catch let error as HTTPExchangeError where error.isTooManyBytes {
            throw .transient("\(request.url) answered with more than \(maximumBodySize) bytes")
        } catch let error as HTTPExchangeError where error.isDeadlineExceeded {
            throw .transient("\(request.url) did not answer within \(timeout.components.seconds) s")
        } catch {
            throw .transient("\(request.url) unreachable: \(String(describing: error).prefix(200))")
        }
    }
}
