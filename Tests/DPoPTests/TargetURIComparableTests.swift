import Testing
@testable import DPoP

/// TargetURI.comparable: every spelling a server may take for its token
/// endpoint has the same form, so GetProof refuses them all.
@Suite struct TargetURIComparableTests {
    static let token = "https://idp.example/api/oidc/token"

    @Test(arguments: [
        "https://idp.example/api/oidc/token",
        "https://idp.example/api/oidc/token/",
        "https://IDP.Example/api/oidc/token",
        "HTTPS://idp.example:443/api/oidc/token",
        "https://idp.example./api/oidc/token",
        "https://idp.example/api/oidc/./token",
        "https://idp.example/api/oidc/x/../token",
        "https://idp.example/api//oidc/token",
        "https://idp.example/api/oidc/%74oken",
        "https://idp.example/api/%6f%69%64%63/TOKEN",
        "https://idp.example/api/oidc/token;jsessionid=1",
        "https://idp.example/api/oidc;x=1/token?grant_type=refresh_token#f",
        "https://idp.example/api/oidc/%2e/token",
        "https://idp.example/api/oidc/userinfo/..;/token",
        "https://idp.example/api/oidc/userinfo/%2e%2e;x/token",
        "https://idp.example/api/oidc/userinfo/..%3b/token",
        "https://idp.example/api/oidc/token%3Bx=1",
    ])
    func spellingsOfTheTokenEndpointAreOne(_ url: String) throws {
        #expect(try TargetURI.comparable(url) == TargetURI.comparable(Self.token))
    }

    @Test(arguments: [
        "https://idp.example/api/oidc/userinfo",
        "https://idp.example/api/oidc/token2",
        "https://idp.example:8443/api/oidc/token",
        "http://idp.example/api/oidc/token",
        "https://rs.example/api/oidc/token",
        "https://idp.example/api/oidc/token/x",
        "https://idp.example/api/oidc/%2Ftoken",
    ])
    func otherResourcesStayApart(_ url: String) throws {
        #expect(try TargetURI.comparable(url) != TargetURI.comparable(Self.token))
    }

    @Test func escapesOfReservedCharactersStayEscapedInUpperCase() {
        #expect(TargetURI.decodingUnreserved("a%2fb%7E%41%zz%4") == "a%2Fb~A%zz%4")
    }
}
