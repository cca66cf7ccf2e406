import Foundation
import Testing
@testable import OAuth

/// Discovery, JWKS and userinfo GETs follow a redirect only within the origin they asked.
@Suite struct RedirectTests {
    let endpoint = HTTPTokenEndpoint(
        endpoints: ProviderEndpoints(), credentials: ClientCredentials(clientID: "c", secret: nil, authentication: .none),
        scope: nil, timeout: .seconds(1))

    @Test(arguments: [
        "https://issuer.example/other/path", "https://ISSUER.example:443/x", "https://issuer.example/.well-known/a?b",
    ])
    func sameOriginRedirectsAreFollowed(_ location: String) {
        #expect(endpoint.sameOrigin(URL(string: location)!, URL(string: "https://issuer.example/.well-known/openid-configuration")!))
    }

    @Test(arguments: [
        "https://attacker.example/.well-known/openid-configuration", "https://issuer.example:8443/",
        "http://issuer.example/", "https://sub.issuer.example/", "http://127.0.0.1:9999/",
    ])
    func otherOriginsAreNot(_ location: String) {
        #expect(!endpoint.sameOrigin(URL(string: location)!, URL(string: "https://issuer.example/.well-known/openid-configuration")!))
    }
}
