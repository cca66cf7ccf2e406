import Foundation
import JWTKit
import Secrets
import Testing
import _CryptoExtras
@testable import OAuth

/// How the client proves who it is: client_secret_basic's encoding (RFC 6749
/// §2.3.1) and signed assertions (RFC 7523 §2.2, OpenID Connect Core §9).
@Suite struct ClientAuthenticationTests {
    static let tokenURL = URL(string: "https://id.example.com/realms/x/token")!
    /// Every character RFC 6749 §2.3.1's form-encoding changes, and some it must keep.
    static let reservedSecret = "a:b%41+c d&e=f/g?h#i\"j'k~l.m_n-o✓é\u{1F511}"

    @Test func basicFormEncodesIDAndSecretBeforeBase64() throws {
        let credentials = ClientCredentials(clientID: "app:1 ü", secret: Secret(Self.reservedSecret), authentication: .basic)
        let form = FormRequest.refresh(refreshToken: Secret("rt"), scope: nil, credentials: credentials)
        let header = try #require(form.headers.first { $0.0 == "Authorization" }?.1)
        #expect(header.hasPrefix("Basic "))
        let decoded = try #require(Data(base64Encoded: String(header.dropFirst(6))).map { String(decoding: $0, as: UTF8.self) })
        // Exactly one colon: the id's own is encoded, so a server splits at the right place.
        let parts = decoded.split(separator: ":", omittingEmptySubsequences: false)
        #expect(parts.count == 2)
        #expect(parts[0] == "app%3A1%20%C3%BC")
        #expect(parts[1].removingPercentEncoding == Self.reservedSecret)
        #expect(!parts[1].contains("+") && !parts[1].contains(" ") && !parts[1].contains("&"))
        #expect(parts[1].hasPrefix("a%3Ab%2541%2Bc%20d%26e%3Df"))
        #expect(!form.body.reveal().contains("client_secret"))
    }

    func verified(_ fields: [(String, String)], with keys: JWTKeyCollection) async throws -> ClientAssertionClaims {
        #expect(fields.count == 2)
        #expect(fields[0].0 == "client_assertion_type")
        #expect(fields[0].1 == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        #expect(fields[1].0 == "client_assertion")
        return try await keys.verify(fields[1].1, as: ClientAssertionClaims.self)
    }

    func header(_ fields: [(String, String)]) throws -> [String: String] {
        var part = String(fields[1].1.split(separator: ".")[0]).replacingOccurrences(of: "-", with: "+")
            .replacingOccurrences(of: "_", with: "/")
        while part.count % 4 != 0 { part += "=" }
        let data = try #require(Data(base64Encoded: part))
        return try JSONDecoder().decode([String: String].self, from: data)
    }

    @Test func privateKeyJWTWithAnECKeyVerifiesWithItsPublicKey() async throws {
        let key = ES256PrivateKey()
        let signer = AssertionSigner.key(try ClientKey(pem: key.pemRepresentation, keyID: "k1"))
        let now = Date(timeIntervalSince1970: 1_800_000_000.7)
        let fields = try await signer.fields(clientID: "app", audience: Self.tokenURL, now: Date())
        let keys = await JWTKeyCollection().add(ecdsa: key.publicKey, kid: "k1")
        let claims = try await verified(fields, with: keys)
        #expect(claims.iss.value == "app" && claims.sub.value == "app")
        #expect(claims.aud.value == [Self.tokenURL.absoluteString])
        #expect(claims.exp.value.timeIntervalSince(claims.iat.value) == 60)
        #expect(try header(fields) == ["alg": "ES256", "typ": "JWT", "kid": "k1"])
        // Whole seconds, for providers that read NumericDate as an integer.
        let later = try await signer.fields(clientID: "app", audience: Self.tokenURL, now: now)
        #expect(try DefaultJWTParser().parse(Array(later[1].1.utf8), as: ClientAssertionClaims.self).payload.iat.value
            == Date(timeIntervalSince1970: 1_800_000_000))
    }

    @Test func anAssertionFromAnotherKeyDoesNotVerify() async throws {
        let signer = AssertionSigner.key(try ClientKey(pem: ES256PrivateKey().pemRepresentation, keyID: nil))
        let fields = try await signer.fields(clientID: "app", audience: Self.tokenURL)
        let keys = await JWTKeyCollection().add(ecdsa: ES256PrivateKey().publicKey)
        await #expect(throws: (any Error).self) { try await keys.verify(fields[1].1, as: ClientAssertionClaims.self) }
        #expect(try header(fields)["kid"] == nil)
    }

    @Test func privateKeyJWTWithAnRSAKeySignsRS256() async throws {
        let backing = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let signer = AssertionSigner.key(try ClientKey(pem: backing.pemRepresentation, keyID: nil))
        let fields = try await signer.fields(clientID: "app", audience: Self.tokenURL)
        let keys = await JWTKeyCollection().add(
            rsa: try Insecure.RSA.PublicKey(pem: backing.publicKey.pemRepresentation), digestAlgorithm: .sha256)
        let claims = try await verified(fields, with: keys)
        #expect(claims.iss.value == "app")
        #expect(try header(fields)["alg"] == "RS256")
    }

    @Test func secretJWTIsHS256WithTheClientSecret() async throws {
        let signer = AssertionSigner.secret(Secret(Self.reservedSecret))
        let fields = try await signer.fields(clientID: "app", audience: Self.tokenURL)
        let keys = await JWTKeyCollection().add(hmac: HMACKey(from: Data(Self.reservedSecret.utf8)), digestAlgorithm: .sha256)
        let claims = try await verified(fields, with: keys)
        #expect(claims.sub.value == "app")
        #expect(try header(fields)["alg"] == "HS256")
        #expect(!fields[1].1.contains(Self.reservedSecret))
    }

    @Test func aSecretTooShortForHS256IsAnErrorNotATrap() throws {
        let short = ClientCredentials(clientID: "app", secret: Secret("hs:sec%ret+ é"), authentication: .secretJWT)
        #expect(throws: TokenEndpointError.transient(
            "secret-jwt needs a client secret of at least 32 bytes (RFC 7518 §3.2); this one has 14")) {
            try short.assertionSigner()
        }
        let keyless = ClientCredentials(clientID: "app", secret: nil, authentication: .privateKeyJWT)
        #expect(throws: TokenEndpointError.self) { try keyless.assertionSigner() }
        #expect(try ClientCredentials(clientID: "app", secret: Secret("s"), authentication: .basic).assertionSigner() == nil)
    }

    @Test func everyAssertionHasItsOwnJTI() async throws {
        let signer = AssertionSigner.key(try ClientKey(pem: ES256PrivateKey().pemRepresentation, keyID: nil))
        var seen: Set<String> = []
        for _ in 0..<50 {
            let fields = try await signer.fields(clientID: "app", audience: Self.tokenURL)
            let claims = try DefaultJWTParser().parse(Array(fields[1].1.utf8), as: ClientAssertionClaims.self).payload
            seen.insert(claims.jti.value)
        }
        #expect(seen.count == 50)
    }

    @Test func keysThatAreNotUsableAreRefusedWithoutTheirContent() throws {
        #expect(throws: ClientKeyError.self) { try ClientKey(pem: "not a key", keyID: nil) }
        let small = try _RSA.Signing.PrivateKey(unsafeKeySize: .init(bitCount: 1024))
        #expect(throws: ClientKeyError.self) { try ClientKey(pem: small.pemRepresentation, keyID: nil) }
        let path = NSTemporaryDirectory() + "tokend-client-key-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: path, contents: Data("-----BEGIN PRIVATE KEY-----\nAAAA\n".utf8))
        do {
            _ = try ClientKey(file: path, keyID: nil)
            Issue.record("a broken key file was accepted")
        } catch {
            #expect(error.description.hasPrefix(path))
            #expect(!error.description.contains("AAAA"))
        }
        #expect(throws: ClientKeyError.self) { try ClientKey(file: path + ".absent", keyID: nil) }
    }

    @Test func aKeyFileLoads() throws {
        let path = NSTemporaryDirectory() + "tokend-client-key-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: path, contents: Data(ES256PrivateKey().pemRepresentation.utf8))
        #expect(try ClientKey(file: path, keyID: "k").algorithm == "ES256")
    }

    // MARK: Pushed authorization requests (RFC 9126)

    func fields(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            fields[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return fields
    }

    @Test func thePushedRequestCarriesTheAuthorizationParametersAndTheClientsAuthentication() throws {
        let login = AuthorizationCodeLogin(
            redirectURI: "http://127.0.0.1:8765/callback", verifier: Secret("v"), state: "s-1", nonce: "n-1")
        let credentials = ClientCredentials(clientID: "app", secret: Secret("p+w:d"), authentication: .basic)
        let form = FormRequest.pushedAuthorization(login, scope: "openid read", credentials: credentials)
        let sent = fields(form.body.reveal())
        #expect(sent == [
            "response_type": "code", "client_id": "app", "redirect_uri": "http://127.0.0.1:8765/callback",
            "state": "s-1", "code_challenge": AuthorizationCodeLogin.challenge(for: Secret("v")),
            "code_challenge_method": "S256", "scope": "openid read", "nonce": "n-1",
        ])
        #expect(form.headers.contains { $0.0 == "Authorization" && $0.1.hasPrefix("Basic ") })
        #expect(!form.body.reveal().contains("client_id=app&client_id"))
        let post = FormRequest.pushedAuthorization(
            login, scope: nil, credentials: ClientCredentials(clientID: "app", secret: Secret("pw"), authentication: .post))
        #expect(fields(post.body.reveal())["client_secret"] == "pw")
        #expect(fields(post.body.reveal())["nonce"] == nil)
    }

    @Test func theBrowserSeesOnlyTheClientIDAndTheRequestURI() throws {
        let answer = Array(#"{"request_uri":"urn:ietf:params:oauth:request_uri:6esc_11ACC5bwc014ltc14eY22c","expires_in":60}"#.utf8)
        let pushed = try PushedAuthorization.parse(status: 201, body: answer, redactor: .none)
        #expect(pushed == PushedAuthorization(requestURI: "urn:ietf:params:oauth:request_uri:6esc_11ACC5bwc014ltc14eY22c", expiresIn: 60))
        let url = try #require(pushed.browserURL(endpoint: URL(string: "https://id.example.com/authorize")!, clientID: "app"))
        let items = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems)
        #expect(items.map(\.name) == ["client_id", "request_uri"])
        #expect(items.map(\.value) == ["app", pushed.requestURI])
    }

    @Test func aRefusedPushIsALoginFailureAndAnOutageIsTransient() {
        let refused = Array(#"{"error":"invalid_client","error_description":"bad secret p+w:d"}"#.utf8)
        do {
            _ = try PushedAuthorization.parse(status: 401, body: refused, redactor: Redactor(["p+w:d"]))
            Issue.record("a refusal was accepted")
        } catch {
            #expect(error.kind == .rejected && error.code == "invalid_client")
            #expect(!error.reason.contains("p+w:d"))
        }
        #expect(throws: TokenEndpointError.transient("the pushed authorization request endpoint answered HTTP 503")) {
            try PushedAuthorization.parse(status: 503, body: [], redactor: .none)
        }
        #expect(throws: TokenEndpointError.self) {
            try PushedAuthorization.parse(status: 201, body: Array(#"{"expires_in":60}"#.utf8), redactor: .none)
        }
    }

    // MARK: A session's redirect-uri

    func endpoint(redirectURI: String?, pushes: Bool = false) -> HTTPTokenEndpoint {
        var endpoints = ProviderEndpoints(
            token: Self.tokenURL, authorization: URL(string: "https://id.example.com/realms/x/auth"))
        endpoints.issParameterSupported = true
        return HTTPTokenEndpoint(
            endpoints: endpoints, credentials: ClientCredentials(clientID: "app", secret: nil, authentication: .none),
            scope: "openid", timeout: .seconds(1), pushesAuthorization: pushes, redirectURI: redirectURI)
    }

    @Test func aConfiguredRedirectURIIsTheOnlyOneABrowserLoginMayUse() async throws {
        let registered = "http://127.0.0.1:8765/callback"
        let other = AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:40000/callback")
        do {
            _ = try await endpoint(redirectURI: registered).beginAuthorization(for: other)
            Issue.record("another redirect URI was accepted")
        } catch {
            #expect(error.kind == .rejected && error.reason.contains("only the redirect URI \(registered)"))
        }
        let url = try await endpoint(redirectURI: registered).beginAuthorization(for: AuthorizationCodeLogin(redirectURI: registered))
        let query = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems)
        #expect(query.first { $0.name == "redirect_uri" }?.value == registered)
        // Without redirect-uri, any loopback redirect the caller listens at.
        #expect(try endpoint(redirectURI: nil).authorizationURL(for: other).absoluteString.contains("40000"))
    }

    @Test func pushingWithoutAPushEndpointSaysSo() async {
        do {
            _ = try await endpoint(redirectURI: nil, pushes: true)
                .beginAuthorization(for: AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:1/cb"))
            Issue.record("a login began without the push the session asks for")
        } catch {
            #expect(error.reason.contains("pushed_authorization_request_endpoint"))
        }
    }

    @Test func discoveryReadsThePushEndpointAndWhetherItIsRequired() throws {
        let body = Array(#"{"issuer":"https://id.example.com","authorization_endpoint":"https://id.example.com/auth","pushed_authorization_request_endpoint":"https://id.example.com/par","require_pushed_authorization_requests":true}"#.utf8)
        let metadata = try ProviderMetadata.parse(body, expectedIssuer: "https://id.example.com")
        let endpoints = ProviderEndpoints(issuer: "https://id.example.com").filled(from: metadata)
        #expect(endpoints.pushedAuthorization?.absoluteString == "https://id.example.com/par")
        #expect(endpoints.requiresPushedAuthorization)
        var insecure = metadata
        insecure.pushedAuthorizationEndpoint = URL(string: "http://evil.example/par")
        #expect(throws: DiscoveryError.self) { try HTTPTokenEndpoint.checkSafe(insecure) }
    }
}
