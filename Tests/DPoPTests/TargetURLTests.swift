import Testing

@testable import DPoP

/// TargetURL: one parse of a URL, and the forms GetProof and DPoP compare.
@Suite struct TargetURLTests {
    @Test(arguments: [
        // The spellings of 127.0.0.1 issue 49 names, and their kin: refused, never read as numbers.
        "http://127.1:8080/token", "http://2130706433:8080/token", "http://0x7f000001:8080/token",
        "http://0x7F.0.0.1/token", "http://0177.0.0.1/token", "http://127.0.0.01/token", "http://127.0.1/token",
        "http://1.2.3.4.5/token", "http://256.0.0.1/token", "http://example.0x1/token", "http://example.123/token",
        // v4-mapped, v4-compatible, v4-translated and NAT64 IPv6.
        "http://[::ffff:127.0.0.1]:8080/token", "http://[::ffff:7f00:1]/token", "http://[::FFFF:127.0.0.1]/token",
        "http://[::127.0.0.1]/token", "http://[::ffff:0:7f00:1]/token", "http://[64:ff9b::7f00:1]/token",
        // IPv6 not in RFC 5952's form, or with a zone.
        "http://[0:0:0:0:0:0:0:1]/token", "http://[::0001]/token", "http://[2001:db8::1:1:1:1:1]/x",
        "http://[2001:db8::1.2.3.4]/x", "http://[fe80::1%25eth0]/token", "http://[v1.x]/token", "http://[::1/token",
        // Escaped, internationalized, or otherwise not a plain name.
        "http://127.0.0.%31/token", "http://%6cocalhost/token", "http://ex%C3%A4mple.test/token", "http://exämple.test/token",
        "http://localhost./token", "http://.localhost/token", "http://a..b/token", "http://a!b/token",
    ])
    func hostsWrittenOtherThanPlainlyAreRefused(_ url: String) throws {
        let target = try? TargetURL(url)
        if let target {
            #expect(target.hostProblem != nil, "\(url) passed as \(target.host)")
        }
    }

    @Test(arguments: [
        "http://127.0.0.1:8080/token", "http://0.0.0.0/x", "http://255.255.255.255/x", "https://LOCALHOST/x",
        "https://api.example.com/x", "https://xn--bcher-kva.example/x", "https://my_host.internal/x", "http://1.2.3.4x/x",
        "http://[::1]:9000/x", "http://[::]/x", "http://[2001:db8::1]/x", "http://[2001:db8:0:1:1:1:1:1]:1/x",
        "http://[1:0:0:1::1]/x", "http://[1::1:0:0:1]/x",
    ])
    func plainHostsPass(_ url: String) throws {
        #expect(try TargetURL(url).hostProblem == nil)
    }

    @Test func theCanonicalIPv6FormCompressesTheFirstLongestRun() {
        #expect(TargetURL.canonicalIPv6([1, 0, 0, 1, 0, 0, 0, 1]) == "1:0:0:1::1")
        #expect(TargetURL.canonicalIPv6([1, 0, 0, 1, 1, 0, 0, 1]) == "1::1:1:0:0:1")
        #expect(TargetURL.canonicalIPv6([1, 0, 1, 1, 1, 1, 1, 1]) == "1:0:1:1:1:1:1:1")
        #expect(TargetURL.canonicalIPv6([0, 0, 0, 0, 0, 0, 0, 0]) == "::")
        #expect(TargetURL.ipv6Groups("::ffff:127.0.0.1") == [0, 0, 0, 0, 0, 0xFFFF, 0x7F00, 1])
        #expect(TargetURL.ipv6Groups("1:2:3:4:5:6:7::8") == nil)
        #expect(TargetURL.ipv6Groups("1::2::3") == nil)
    }

    @Test(arguments: [
        "ftp://as.example/x", "/token", "https:///token", "https://user:pw@as.example/x", "https://user@as.example/x",
        "https://as.example:0/x", "https://as.example:65536/x", "https://as.example:8a/x", "https://as.example/a b",
        "https://as.example/a\\..\\b", "https://as.example/%zz", "https://as.example/a%4", "http:as.example/x",
    ])
    func whatIsNotAnHTTPURLIsRefused(_ url: String) {
        #expect(throws: ProofError.self) { try TargetURL(url) }
    }

    @Test func theFormsOfOneURL() throws {
        let url = try TargetURL("HTTPS://API.Example.COM:443/a/%7euser/./b/../c%2f%3b;x?q=1#f")
        #expect(url.htu == "https://api.example.com/a/%7euser/./b/../c%2f%3b;x")
        #expect(url.origin == "https://api.example.com")
        #expect(url.normalizedPath == "/a/~user/c%2F%3B;x")
        #expect(url.normalized == "https://api.example.com/a/~user/c%2F%3B;x")
        #expect(try TargetURL("http://h:/x").port == nil)
        #expect(try TargetURL("http://h:0080/x").port == nil)
        #expect(try TargetURL("https://h").htu == "https://h/")
        #expect(TargetURL.removingDotSegments("/a/b/c/./../../g") == "/a/g")
        #expect(TargetURL.removingDotSegments("/a/..") == "/")
        #expect(TargetURL.removingDotSegments("/..") == "/")
        #expect(TargetURL.normalizingEscapes("a%2fb%7E%41%zz%4") == "a%2Fb~A%zz%4")
    }

    @Test(arguments: [
        "https://as.example/mail/../admin", "https://as.example/mail/%2E%2e/admin", "https://as.example/mail/./x",
        "https://as.example/mail/..;/admin", "https://as.example/mail/%2e%2e;/admin", "https://as.example/mail/..%3Bx/admin",
        "https://as.example/mail/.;x/x", "https://as.example/mail/..%2Fadmin", "https://as.example/mail%2f..%2fadmin",
        "https://as.example/mail/..%5Cadmin",
    ])
    func pathsAServerMayResolveElsewhereHaveAProblem(_ url: String) throws {
        #expect(try TargetURL(url).pathProblem != nil)
    }

    @Test(arguments: ["https://as.example/mail/inbox;v=2", "https://as.example/mail/...;x", "https://as.example/a.b/.c"])
    func pathsWithDotsInNamesHaveNone(_ url: String) throws {
        #expect(try TargetURL(url).pathProblem == nil)
    }
}

/// TargetURL.endpointKey: every spelling a server may take for its token
/// endpoint has the same key, so GetProof refuses them all.
@Suite struct EndpointKeyTests {
    static let token = "https://idp.example/api/oidc/token"

    @Test(arguments: [
        "https://idp.example/api/oidc/token", "https://idp.example/api/oidc/token/", "https://IDP.Example/api/oidc/token",
        "HTTPS://idp.example:443/api/oidc/token", "https://idp.example./api/oidc/token", "https://idp.example/api/oidc/./token",
        "https://idp.example/api/oidc/x/../token", "https://idp.example/api//oidc/token", "https://idp.example/api/oidc/%74oken",
        "https://idp.example/api/%6f%69%64%63/TOKEN", "https://idp.example/api/oidc/token;jsessionid=1",
        "https://idp.example/api/oidc;x=1/token?grant_type=refresh_token#f", "https://idp.example/api/oidc/%2e/token",
        "https://idp.example/api/oidc/userinfo/..;/token", "https://idp.example/api/oidc/userinfo/%2e%2e;x/token",
        "https://idp.example/api/oidc/userinfo/..%3b/token", "https://idp.example/api/oidc/token%3Bx=1",
        // An outside review's: http for https (a proxy that ends TLS), servers that trim a last
        // segment's dots and spaces, and servers that decode twice.
        "http://idp.example/api/oidc/token", "http://idp.example:443/api/oidc/token", "https://idp.example/api/oidc/token.",
        "https://idp.example/api/oidc/token%2E", "https://idp.example/api/oidc/token%20", "https://idp.example/api/oidc/token%09",
        "https://idp.example/api/oidc/token%00", "https://idp.example/api/oidc/token.%20.",
        "https://idp.example/api/oidc/userinfo/%252e%252e/token", "https://idp.example/api/oidc/%2574oken",
    ])
    func spellingsOfTheTokenEndpointAreOne(_ url: String) throws {
        #expect(try TargetURL(url).endpointKey == TargetURL(Self.token).endpointKey)
    }

    @Test(arguments: [
        "https://idp.example/api/oidc/userinfo", "https://idp.example/api/oidc/token2", "https://idp.example:8443/api/oidc/token",
        "https://rs.example/api/oidc/token", "https://idp.example/api/oidc/token/x",
        "https://idp.example/api/oidc/%2Ftoken",
    ])
    func otherResourcesStayApart(_ url: String) throws {
        #expect(try TargetURL(url).endpointKey != TargetURL(Self.token).endpointKey)
    }
}
