import Foundation
import Secrets
import Testing
@testable import OAuth

@Suite struct PKCETests {
    @Test func challengeMatchesRFC7636AppendixB() {
        let verifier = Secret("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        #expect(AuthorizationCodeLogin.challenge(for: verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func randomTokensAreLongAndDistinct() {
        let tokens = Set((0..<100).map { _ in randomToken() })
        #expect(tokens.count == 100)
        #expect(tokens.allSatisfy { $0.count == 43 && !$0.contains("=") && !$0.contains("+") && !$0.contains("/") })
    }

    @Test func authorizationURLCarriesTheRequest() throws {
        let login = AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:5000/callback")
        let url = try #require(login.authorizationURL(
            endpoint: URL(string: "https://id.example.com/authorize?tenant=a")!, clientID: "c 1", scope: "openid email"))
        let items = Dictionary(uniqueKeysWithValues: (URLComponents(url: url, resolvingAgainstBaseURL: false)!.queryItems ?? [])
            .map { ($0.name, $0.value ?? "") })
        #expect(items["tenant"] == "a")
        #expect(items["response_type"] == "code")
        #expect(items["client_id"] == "c 1")
        #expect(items["code_challenge_method"] == "S256")
        #expect(items["code_challenge"] == AuthorizationCodeLogin.challenge(for: login.verifier))
        #expect(items["state"] == login.state)
        #expect(items["nonce"] == login.nonce)
        #expect(!url.absoluteString.contains(login.verifier.reveal()))
    }

    @Test func noNonceWithoutOpenID() throws {
        let login = AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:5000/callback")
        let url = try #require(login.authorizationURL(endpoint: URL(string: "https://id.example.com/a")!, clientID: "c", scope: "read"))
        #expect(!url.absoluteString.contains("nonce="))
    }
}

@Suite struct CallbackTests {
    let login = AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:5000/callback", state: "s-1")
    let issuer = "https://id.example.com"

    func code(_ query: String, issRequired: Bool = false, base: String = "http://127.0.0.1:5000/callback")
        throws(CallbackError) -> String
    {
        try login.code(fromCallback: "\(base)?\(query)", issuer: issuer, issRequired: issRequired).reveal()
    }

    @Test func rightStateGivesTheCode() throws {
        #expect(try code("code=abc&state=s-1") == "abc")
        #expect(try code("code=abc&state=s-1&iss=https%3A%2F%2Fid.example.com", issRequired: true) == "abc")
    }

    @Test func wrongOrMissingStateIsInvalid() {
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-2") }
        #expect(throws: CallbackError.self) { try code("code=abc") }
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-1&state=s-1") }
    }

    @Test func otherRedirectOrIssuerIsInvalid() {
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-1", base: "http://127.0.0.1:5001/callback") }
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-1", base: "http://127.0.0.1:5000/other") }
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-1&iss=https%3A%2F%2Fevil.example") }
        #expect(throws: CallbackError.self) { try code("code=abc&state=s-1", issRequired: true) }
    }

    @Test func withoutAConfiguredIssuerAnyIssIsAccepted() throws {
        let callback = "http://127.0.0.1:5000/callback?code=abc&state=s-1&iss=https%3A%2F%2Fid.example.com"
        #expect(try login.code(fromCallback: callback, issuer: nil, issRequired: false).reveal() == "abc")
    }

    @Test func errorIsADenialOnlyWithTheRightState() {
        do {
            _ = try code("error=access_denied&error_description=no&state=s-1")
            Issue.record("no error")
        } catch {
            guard case .denied(let errorCode, _) = error else { Issue.record("\(error)"); return }
            #expect(errorCode == "access_denied")
        }
        do {
            _ = try code("error=access_denied&state=forged")
            Issue.record("no error")
        } catch {
            guard case .invalid = error else { Issue.record("a forged denial ended the login"); return }
        }
    }
}

@Suite struct DiscoveryTests {
    @Test func bothWellKnownLocations() {
        #expect(ProviderMetadata.discoveryURLs(issuer: "https://id.example.com/realms/x/").map(\.absoluteString) == [
            "https://id.example.com/realms/x/.well-known/openid-configuration",
            "https://id.example.com/.well-known/oauth-authorization-server/realms/x",
        ])
        #expect(ProviderMetadata.discoveryURLs(issuer: "https://id.example.com").map(\.absoluteString) == [
            "https://id.example.com/.well-known/openid-configuration",
            "https://id.example.com/.well-known/oauth-authorization-server",
        ])
    }

    @Test func documentMustNameTheIssuer() throws {
        let body = Array(#"{"issuer":"https://evil.example","token_endpoint":"https://evil.example/t"}"#.utf8)
        #expect(throws: DiscoveryError.self) { try ProviderMetadata.parse(body, expectedIssuer: "https://id.example.com") }
        let good = Array(#"{"issuer":"https://id.example.com","token_endpoint":"https://id.example.com/t","device_authorization_endpoint":"https://id.example.com/d"}"#.utf8)
        let metadata = try ProviderMetadata.parse(good, expectedIssuer: "https://id.example.com")
        #expect(ProviderMetadata.decode(metadata.encoded()) == metadata)
    }

    @Test func configuredEndpointsWin() {
        var metadata = ProviderMetadata(issuer: "https://id.example.com")
        metadata.tokenEndpoint = URL(string: "https://id.example.com/token")
        metadata.revocationEndpoint = URL(string: "https://id.example.com/revoke")
        let configured = ProviderEndpoints(issuer: "https://id.example.com", token: URL(string: "https://other.example/token"))
        let merged = configured.filled(from: metadata)
        #expect(merged.token?.absoluteString == "https://other.example/token")
        #expect(merged.revocation?.absoluteString == "https://id.example.com/revoke")
    }

    @Test func unsafeEndpointsAreRefused() {
        var metadata = ProviderMetadata(issuer: "https://id.example.com")
        metadata.tokenEndpoint = URL(string: "http://id.example.com/token")
        #expect(throws: DiscoveryError.self) { try HTTPTokenEndpoint.checkSafe(metadata) }
        metadata.tokenEndpoint = URL(string: "http://127.0.0.1:8000/token")
        #expect(throws: Never.self) { try HTTPTokenEndpoint.checkSafe(metadata) }
    }
}

@Suite struct DeviceAuthorizationTests {
    @Test func intervalOfOneIsKept() throws {
        // On Linux NSNumber(1) is Bool: the old check lost this and polled every 5 s.
        let body = Array(#"{"device_code":"d","user_code":"U","verification_uri":"https://x/d","expires_in":1,"interval":1}"#.utf8)
        let device = try DeviceAuthorization.parse(status: 200, body: body)
        #expect(device.interval == 1)
        #expect(device.expiresIn == 1)
        #expect(device.deviceCode.reveal() == "d")
    }

    @Test func defaultsAndOldName() throws {
        let body = Array(#"{"device_code":"d","user_code":"U","verification_url":"https://x/d"}"#.utf8)
        let device = try DeviceAuthorization.parse(status: 200, body: body)
        #expect(device.interval == 5 && device.expiresIn == 600 && device.verificationURI == "https://x/d")
    }

    @Test func errorsAreClassified() {
        #expect(throws: TokenEndpointError.rejected(code: "invalid_client", reason: "device authorization endpoint answered invalid_client")) {
            try DeviceAuthorization.parse(status: 401, body: Array(#"{"error":"invalid_client"}"#.utf8))
        }
        #expect(throws: TokenEndpointError.self) { try DeviceAuthorization.parse(status: 503, body: []) }
    }

    @Test func lenientIntegersTellBooleansFromNumbers() throws {
        let object = try #require(providerObject(Array(#"{"t":true,"f":false,"one":1,"zero":0,"s":"7","x":"y"}"#.utf8)))
        #expect(object["t"]?.lenientInt == nil)
        #expect(object["f"]?.lenientInt == nil)
        #expect(object["one"]?.lenientInt == 1)
        #expect(object["zero"]?.lenientInt == 0)
        #expect(object["s"]?.lenientInt == 7)
        #expect(object["x"]?.lenientInt == nil)
    }
}
