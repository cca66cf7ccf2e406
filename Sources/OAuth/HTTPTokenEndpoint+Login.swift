import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback
import Secrets

extension HTTPTokenEndpoint {
    /// Tries OpenID Connect discovery, then RFC 8414; the first document that
    /// names the configured issuer and only safe endpoints is used. What the
    /// provider said is redacted of the client secret.
    public func discover() async throws(DiscoveryError) -> ProviderMetadata {
        do {
            return try await findDocument()
        } catch {
            throw DiscoveryError(clientRedactor.redact(error.description))
        }
    }

    func findDocument() async throws(DiscoveryError) -> ProviderMetadata {
        guard let issuer = configured.issuer else { throw DiscoveryError("no issuer is configured") }
        var problems: [String] = []
        for url in ProviderMetadata.discoveryURLs(issuer: issuer) {
            do {
                let answer = try await get(url)
                guard answer.status == 200 else {
                    problems.append("\(url) answered HTTP \(answer.status)")
                    continue
                }
                let metadata = try ProviderMetadata.parse(answer.body, expectedIssuer: issuer)
                try Self.checkSafe(metadata)
                restore(metadata)
                return metadata
            } catch let error as TokenEndpointError {
                problems.append(error.reason)
            } catch let error as DiscoveryError {
                throw error  // a document that answers wrongly is not retried elsewhere
            } catch {
                problems.append("\(error)")
            }
        }
        throw DiscoveryError("discovery from \(issuer) failed: \(problems.joined(separator: "; "))")
    }

    public func restore(_ metadata: ProviderMetadata) {
        guard metadata.issuer == configured.issuer else { return }
        let merged = configured.filled(from: metadata)
        endpoints.withLock { $0 = merged }
    }

    /// Every endpoint in a document is https, or http to a loopback address.
    static func checkSafe(_ metadata: ProviderMetadata) throws(DiscoveryError) {
        let urls = [
            metadata.tokenEndpoint, metadata.revocationEndpoint, metadata.authorizationEndpoint,
            metadata.deviceAuthorizationEndpoint, metadata.userinfoEndpoint, metadata.jwksURI,
            metadata.pushedAuthorizationEndpoint,
        ].compactMap { $0 }
        for url in urls where !isSafeEndpoint(url) {
            throw DiscoveryError("the discovery document names \(url), which is neither https nor loopback http")
        }
    }

    public func deviceAuthorization() async throws(TokenEndpointError) -> DeviceAuthorization {
        guard let url = current.deviceAuthorization else { throw unknownEndpoint("device authorization") }
        let form = FormRequest.deviceAuthorization(scope: scope, resources: resources, credentials: credentials)
        do {
            let answer = try await post(form, to: url)
            return try DeviceAuthorization.parse(status: answer.status, body: answer.body, redactor: form.redactor)
        } catch {
            throw error.redacting(form.redactor)
        }
    }

    public func authorizationURL(for login: AuthorizationCodeLogin) throws(TokenEndpointError) -> URL {
        try checkRedirect(login)
        guard let endpoint = current.authorization else { throw unknownEndpoint("authorization") }
        guard let url = login.authorizationURL(
            endpoint: endpoint, clientID: credentials.clientID, scope: scope, resources: resources)
        else {
            throw .transient("the authorization endpoint \(endpoint) cannot take query parameters")
        }
        return url
    }

    /// A session with a `redirect-uri` takes browser logins only there: the
    /// provider would refuse any other after the user has signed in.
    func checkRedirect(_ login: AuthorizationCodeLogin) throws(TokenEndpointError) {
        guard let redirectURI, login.redirectURI != redirectURI else { return }
        throw .rejected(
            code: "invalid_request",
            reason: "this session's provider takes only the redirect URI \(redirectURI) (redirect-uri): log in listening there")
    }

    public func redeem(_ grant: LoginGrant, cookieHeader: String) async -> RefreshAnswer {
        await redeem(grant, cookieHeader: cookieHeader, proofKey: nil)
    }

    public func redeem(_ grant: LoginGrant, cookieHeader: String, proofKey: (any ProofKey)?) async -> RefreshAnswer {
        switch grant {
        case .authorizationCode(let code, let login):
            let form = FormRequest.authorizationCode(
                code: code, redirectURI: login.redirectURI, verifier: login.verifier, resources: resources,
                credentials: credentials)
            return await exchange(form, cookieHeader, proofKey: proofKey)
        case .deviceCode(let deviceCode):
            return await exchange(
                FormRequest.deviceCode(deviceCode, resources: resources, credentials: credentials), cookieHeader,
                proofKey: proofKey)
        }
    }

    public func identity(of response: TokenResponse, nonce: String?) async throws(IDTokenError) -> Identity? {
        let scope = response.scope ?? self.scope ?? ""
        guard AuthorizationCodeLogin.asksForOpenID(scope) || response.idToken != nil else { return nil }
        let endpoints = current
        if let idToken = response.idToken {
            guard let issuer = endpoints.issuer, let jwks = endpoints.jwks else {
                throw IDTokenError("an ID token arrived but the issuer's JWKS is unknown (set issuer to verify it)")
            }
            let keys: HTTPAnswer
            do {
                keys = try await get(jwks)
            } catch {
                throw IDTokenError("the issuer's JWKS could not be read: \(error.redacting(clientRedactor).reason)")
            }
            guard keys.status == 200 else { throw IDTokenError("the issuer's JWKS answered HTTP \(keys.status)") }
            return try await IDTokenVerifier(issuer: issuer, clientID: credentials.clientID, jwks: keys.body)
                .verify(idToken, nonce: nonce)
        }
        // No ID token (a device grant at some servers): ask userinfo with the new access token.
        guard let userinfo = endpoints.userinfo else { return nil }
        let answer: HTTPAnswer
        do {
            answer = try await get(userinfo, bearer: response.accessToken)
        } catch {
            let redactor = Redactor([response.accessToken.reveal(), credentials.secret?.reveal() ?? ""])
            throw IDTokenError("the userinfo endpoint could not be read: \(error.redacting(redactor).reason)", refusesLogin: false)
        }
        guard answer.status == 200, let identity = Identity.fromUserInfo(answer.body) else {
            throw IDTokenError("the userinfo endpoint answered HTTP \(answer.status) without a subject", refusesLogin: false)
        }
        return identity
    }
}

/// https, or plain http to a loopback address (where no network can read tokens).
public func isSafeEndpoint(_ url: URL) -> Bool {
    Loopback.isSafeScheme(url.scheme, host: url.host)
}
