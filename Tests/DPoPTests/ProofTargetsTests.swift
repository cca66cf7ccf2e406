import Testing

@testable import DPoP

/// ProofTargets: the allow-list GetProof signs by.
@Suite struct ProofTargetsTests {
    static let provider = [
        "http://127.0.0.1:9000/api/oidc/token", "http://127.0.0.1:9000/api/oidc/revoke",
        "https://mtls.idp.example/api/oidc/mtls/token",
    ]
    let targets = ProofTargets(
        within: ["https://api.example.test/mail", "http://127.0.0.1:8080/", "https://files.example.test/docs/", "api://mail",
                 "http://127.1:8081/", "http://127.0.0.1:9000/"],
        exactly: ["http://127.0.0.1:9000/api/oidc/userinfo"], never: Self.provider)

    func allows(_ url: String) throws -> Bool {
        try targets.refusal(of: TargetURL(url)) == nil
    }

    func kind(_ url: String) throws -> ProofTargets.Refusal.Kind? {
        try targets.refusal(of: TargetURL(url))?.kind
    }

    @Test func aURLWithinAnAllowedOneGetsAProof() throws {
        #expect(targets.within.count == 4)
        #expect(try allows("https://api.example.test/mail"))
        #expect(try allows("https://api.example.test/mail/inbox?unread=1#top"))
        #expect(try allows("https://API.Example.TEST:443/mail/x"))
        #expect(try allows("https://api.example.test/mail/%69nbox"), "an escaped unreserved character is the character")
        #expect(try allows("http://127.0.0.1:8080/anything/at/all"))
        #expect(try allows("http://127.0.0.1:8080"))
        #expect(try allows("https://files.example.test/docs/a.txt"))
        #expect(try allows("https://api.example.test/mail/inbox;v=2"), "a parameter on an ordinary segment is fine")
    }

    @Test func thePathMatchesAtASegmentBoundary() throws {
        #expect(try kind("https://api.example.test/mailbox") == .notListed)
        #expect(try kind("https://api.example.test/") == .notListed)
        #expect(try kind("https://files.example.test/docs") == .notListed)
        #expect(try kind("https://api.example.test/Mail/inbox") == .notListed)
    }

    @Test func schemeHostAndPortMustBeTheAllowedOnes() throws {
        for url in [
            "http://api.example.test/mail", "https://api.example.test:8443/mail", "https://evil.example.test/mail",
            "https://api.example.test.evil.test/mail", "http://127.0.0.1:8081/", "http://127.0.0.1/", "http://localhost:8080/",
        ] {
            #expect(try kind(url) == .notListed, "\(url)")
        }
    }

    @Test func theUserinfoEndpointIsAllowedExactly() throws {
        let only = ProofTargets(within: [], exactly: ["http://127.0.0.1:9000/api/oidc/userinfo"], never: Self.provider)
        #expect(try only.refusal(of: TargetURL("http://127.0.0.1:9000/api/oidc/userinfo?schema=openid")) == nil)
        #expect(try only.refusal(of: TargetURL("http://127.0.0.1:9000/api/oidc/%75serinfo")) == nil)
        #expect(try only.refusal(of: TargetURL("http://127.0.0.1:9000/api/oidc/userinfo/x"))?.kind == .notListed)
        #expect(try only.refusal(of: TargetURL("http://localhost:9000/api/oidc/userinfo"))?.kind == .notListed)
    }

    @Test func theProvidersEndpointsAreRefusedEvenWhenListed() throws {
        // http://127.0.0.1:9000/ is listed: everything under it but the provider's own endpoints gets proofs.
        #expect(try allows("http://127.0.0.1:9000/api/oidc/userinfo"))
        #expect(try allows("http://127.0.0.1:9000/api/oidc/token2"))
        for url in [
            "http://127.0.0.1:9000/api/oidc/token", "http://127.0.0.1:9000/api/oidc/TOKEN/", "http://127.0.0.1:9000/api/oidc/token;x",
            "http://127.0.0.1:9000/api/oidc/x/../token", "http://127.0.0.1:9000/api/oidc/revoke",
        ] {
            #expect(try kind(url) == .providerEndpoint, "\(url)")
        }
        let listed = ProofTargets(within: ["https://mtls.idp.example/"], never: Self.provider)
        #expect(try listed.refusal(of: TargetURL("https://mtls.idp.example/api/oidc/mtls/token"))?.kind == .providerEndpoint)
        #expect(try listed.refusal(of: TargetURL("https://mtls.idp.example/api/oidc/userinfo")) == nil)
    }

    @Test func otherSpellingsOfAnAllowedHostAreRefusedForTheirHost() throws {
        for url in [
            "http://127.1:9000/api/oidc/token", "http://2130706433:9000/api/oidc/token", "http://0x7f000001:9000/api/oidc/token",
            "http://0177.0.0.1:9000/api/oidc/token", "http://[::ffff:127.0.0.1]:9000/api/oidc/token",
            "http://127.0.0.%31:9000/api/oidc/token", "http://127.1:8081/x",
        ] {
            #expect(try kind(url) == .host, "\(url)")
        }
        // Where the host is plainly written but not listed, it is simply not allowed.
        #expect(try kind("http://localhost:9000/api/oidc/token") == .notListed)
    }

    @Test func pathsThatMayEscapeAreRefused() throws {
        for url in [
            "https://api.example.test/mail/../admin", "https://api.example.test/mail/%2E%2e/admin", "https://api.example.test/mail/..;/admin",
            "https://api.example.test/mail/..%2Fadmin", "https://api.example.test/mail%2f..%2fadmin",
        ] {
            #expect(try kind(url) == .path, "\(url)")
        }
    }

    @Test func unusableEntriesAllowNothingAndAreNamed() {
        #expect(targets.unusable.map(\.entry) == ["api://mail", "http://127.1:8081/"])
        #expect(ProofTargets(within: [], never: []).within.isEmpty)
    }
}
