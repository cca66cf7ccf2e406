import NIOCore
import Testing
import TokendClient

@testable import ProxyProgram

/// What the proxy reads and writes of DPoP (RFC 9449) itself: challenges, htu, nonces, header lines.
@Suite struct ProxyDPoPTests {
    @Test func aDPoPChallengesErrorIsFoundAmongOthers() {
        #expect(DPoP.challengeError([#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#]) == "use_dpop_nonce")
        // Several challenges in one value, the DPoP one after a Bearer one with parameters of its own.
        #expect(DPoP.challengeError([#"Bearer realm="api", error="invalid_token", DPoP algs="ES256 PS256", error="use_dpop_nonce""#]) == "use_dpop_nonce")
        // Several values; the scheme in any case; a token value; spaces around "=".
        #expect(DPoP.challengeError([#"Basic realm="x""#, "dpop error = invalid_dpop_proof"]) == "invalid_dpop_proof")
        // A Bearer challenge's error is not DPoP's; a token68 scheme is passed over.
        #expect(DPoP.challengeError([#"Bearer error="use_dpop_nonce""#]) == nil)
        #expect(DPoP.challengeError(["Negotiate YWxhZGRpbjpvcGVuc2VzYW1l==, DPoP error=\"invalid_token\""]) == "invalid_token")
        #expect(DPoP.challengeError(["DPoP", #"DPoP algs="ES256""#, ""]) == nil)
    }

    @Test func challengesAreReadWithTheirQuotedPairsAndCutWhereUnreadable() {
        #expect(Challenge.parse(#"DPoP error="a\"b", realm="r""#) == [Challenge(scheme: "DPoP", parameters: ["error": #"a"b"#, "realm": "r"])])
        #expect(Challenge.parse(#"Basic abc/def==, DPoP Error="x""#) == [Challenge(scheme: "Basic"), Challenge(scheme: "DPoP", parameters: ["error": "x"])])
        // No closing quote: the challenge's scheme stands, its broken parameter does not.
        #expect(Challenge.parse(#"DPoP error="use_dpop_nonce"#) == [Challenge(scheme: "DPoP")])
        #expect(Challenge.parse(",,  ,") == [])
    }

    @Test func htuIsTheUpstreamURLWithoutQueryOrFragment() {
        #expect(DPoP.htu("https://api.example.com/v1/items?page=2&x=%3F") == "https://api.example.com/v1/items")
        #expect(DPoP.htu("http://127.0.0.1:8080/a/b#part") == "http://127.0.0.1:8080/a/b")
        #expect(DPoP.htu("https://api.example.com/") == "https://api.example.com/")
        #expect(DPoP.htu("https://api.example.com/a%2Fb/") == "https://api.example.com/a%2Fb/")
    }

    @Test func anExchangesTargetNamesItsMethodAndUpstreamURL() throws {
        let head = try RequestHead(ByteBuffer(string: "PROPFIND /files/x?depth=1 HTTP/1.1\r\nHost: h\r\n\r\n"))
        let upstream = try #require(Upstream("https://dav.example.com:8443/base/"))
        let exchange = Exchange(head: head, upstream: upstream, target: "/files/x?depth=1", path: "/files/x")
        #expect(exchange.proofTarget == ProofTarget(method: "PROPFIND", htu: "https://dav.example.com:8443/base/files/x"))
    }

    @Test func onlyNQCHARNoncesAreKept() {
        let state = ProofState()
        #expect(state.nonce == nil)
        state.keep(nonce: "eyJ7S_zG.rTQ-2n~")
        #expect(state.nonce == "eyJ7S_zG.rTQ-2n~")
        for bad in ["", "a b", "a\"b", "a\\b", "é", String(repeating: "n", count: DPoP.maximumNonce + 1)] {
            state.keep(nonce: bad)
            #expect(state.nonce == "eyJ7S_zG.rTQ-2n~")
        }
    }

    /// The proxy keeps no nonce GetProof would refuse (1024 bytes: DPoPProof.maximumNonce in tokend), and
    /// a kept one tokend refuses all the same is forgotten, unless another came meanwhile.
    @Test func noNonceIsKeptThatAProofCannotCarry() {
        let state = ProofState()
        #expect(DPoP.maximumNonce == 1024)
        let longest = String(repeating: "n", count: DPoP.maximumNonce)
        state.keep(nonce: longest)
        #expect(state.nonce == longest)
        state.keep(nonce: longest + "n")
        #expect(state.nonce == longest)
        state.forget(nonce: "other")
        #expect(state.nonce == longest)
        state.forget(nonce: longest)
        #expect(state.nonce == nil)
    }

    @Test func aKindOfRefusalIsLoggedOnceAMinute() {
        let state = ProofState()
        #expect(state.toLog("RateLimited", now: 100) == 1)
        #expect(state.toLog("RateLimited", now: 101) == nil)
        #expect(state.toLog("KeyUnavailable", now: 102) == 1)
        #expect(state.toLog("RateLimited", now: 159) == nil)
        // A minute on: logged again, with how many came meanwhile.
        #expect(state.toLog("RateLimited", now: 160.5) == 3)
        #expect(state.toLog("RateLimited", now: 161) == nil)
    }

    @Test func aBoundTokenGoesAsDPoPWithItsProofAndABearerOneAsItCame() throws {
        func token(_ type: String) -> AccessToken {
            AccessToken(accessToken: "t0k", tokenType: type, expiresAt: 2_000_000_000, generation: 1, scope: nil)
        }
        let proof = RequestProof(jwt: "h.c.s", nonce: nil, nonceRetry: false)
        let bound = try #require(RequestCredentials(token: token("dpop"), cookies: "a=1", proof: proof))
        #expect(bound.bound && bound.authorization == "DPoP t0k" && bound.proof?.jwt == "h.c.s")
        let bearer = try #require(RequestCredentials(token: token("bearer"), cookies: "", proof: proof))
        #expect(!bearer.bound && bearer.authorization == "bearer t0k" && bearer.proof == nil)
        #expect(RequestCredentials(token: token("DPoP"), cookies: "", proof: RequestProof(jwt: "a\r\nX: y", nonce: nil, nonceRetry: false)) == nil)
        let lines = Wire.credentialLines(host: "h", authorization: bound.authorization, proof: "h.c.s", cookies: "a=1")
        #expect(String(buffer: lines) == "Host: h\r\nAuthorization: DPoP t0k\r\nDPoP: h.c.s\r\nCookie: a=1\r\n")
    }

    @Test func aClientsOwnDPoPHeaderNeverReachesTheUpstream() throws {
        let head = try RequestHead(ByteBuffer(string: "GET /x HTTP/1.1\r\nDPoP: theirs\r\nX-A: 1\r\ndpop: again\r\nDPoP-Nonce: n\r\n\r\n"))
        var bytes = ByteBuffer()
        let lines = Wire.credentialLines(host: "h", authorization: "DPoP t", proof: "p", cookies: "")
        bytes.writeUpstreamHead(head, uri: "/x", credentialLines: lines, length: nil, chunked: false)
        #expect(String(buffer: bytes) == "GET /x HTTP/1.1\r\nX-A: 1\r\nDPoP-Nonce: n\r\nHost: h\r\nAuthorization: DPoP t\r\nDPoP: p\r\n\r\n")
    }

    @Test func aNonceAnswerIsReadFromTheHeadsFieldsByName() throws {
        let head = try ResponseHead(
            ByteBuffer(string: "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: DPoP error=\"use_dpop_nonce\"\r\nDPoP-Nonce: n-2\r\nContent-Length: 0\r\n\r\n"),
            toHead: false)
        #expect(head.fields.named("dpop-nonce") == ["n-2"])
        #expect(DPoP.challengeError(head.fields.named("www-authenticate")) == "use_dpop_nonce")
    }
}
