import Crypto
import DPoP
import Foundation
import Testing

@Suite struct ThumbprintTests {
    /// RFC 7638 §3.1's worked example.
    @Test func rfc7638Example() {
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
        #expect(JWKThumbprint.sha256(of: ["e": "AQAB", "kty": "RSA", "n": n]) == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
    }

    /// An EC key's thumbprint is taken over crv, kty, x, y in that order, with no spaces.
    @Test func ecThumbprintIsOverTheCanonicalMembers() throws {
        let key = P256.Signing.PrivateKey()
        let jwk = P256PublicJWK(key.publicKey)
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(jwk.x)","y":"\#(jwk.y)"}"#
        #expect(jwk.thumbprint == Base64URL.encode(SHA256.hash(data: Data(canonical.utf8))))
        #expect(jwk.thumbprint.count == 43)
        #expect(Base64URL.decode(jwk.x)?.count == 32 && Base64URL.decode(jwk.y)?.count == 32)
    }
}

@Suite struct TargetURITests {
    @Test(arguments: [
        ("https://AS.Example.COM/token", "https://as.example.com/token"),
        ("HTTPS://as.example.com:443/token", "https://as.example.com/token"),
        ("http://as.example.com:80/token", "http://as.example.com/token"),
        ("https://as.example.com:8443/token", "https://as.example.com:8443/token"),
        ("https://as.example.com:80/token", "https://as.example.com:80/token"),
        ("http://127.0.0.1:8080/api/oidc/token?x=1#frag", "http://127.0.0.1:8080/api/oidc/token"),
        ("https://as.example.com", "https://as.example.com/"),
        ("https://as.example.com/token/", "https://as.example.com/token/"),
        ("https://as.example.com/a%2Fb", "https://as.example.com/a%2Fb"),
        ("http://[::1]:9000/token", "http://[::1]:9000/token"),
    ])
    func normalised(_ given: String, _ htu: String) throws {
        #expect(try TargetURI.htu(given) == htu)
    }

    @Test(arguments: ["ftp://as.example.com/token", "/token", "https:///token", "https://user:pw@as.example.com/token"])
    func refused(_ given: String) {
        #expect(throws: ProofError.self) { try TargetURI.htu(given) }
    }

    @Test func originOfAnHTU() {
        #expect(TargetURI.origin(ofHTU: "https://as.example.com:8443/a/b") == "https://as.example.com:8443")
    }
}

@Suite struct ProofTests {
    struct Decoded {
        var header: [String: Any]
        var claims: DPoPProof.Claims
        var signingInput: String
        var signature: [UInt8]
    }

    func decode(_ proof: String) throws -> Decoded {
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        #expect(parts.count == 3)
        let header = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[0])))) as? [String: Any]
        let claims = try JSONDecoder().decode(DPoPProof.Claims.self, from: Data(try #require(Base64URL.decode(parts[1]))))
        return Decoded(
            header: try #require(header), claims: claims, signingInput: parts[0] + "." + parts[1],
            signature: try #require(Base64URL.decode(parts[2])))
    }

    @Test func tokenEndpointProof() async throws {
        let key = StateProofKey()
        let proof = try await DPoPProof.make(
            key: key, method: "POST", url: "https://AS.example.com:443/token?ignored", nonce: "n-1", now: 1_700_000_000.7)
        let decoded = try decode(proof)
        #expect(decoded.header["typ"] as? String == "dpop+jwt")
        #expect(decoded.header["alg"] as? String == "ES256")
        let jwk = try #require(decoded.header["jwk"] as? [String: String])
        #expect(jwk == ["kty": "EC", "crv": "P-256", "x": key.publicKey.x, "y": key.publicKey.y])
        #expect(decoded.claims.htm == "POST")
        #expect(decoded.claims.htu == "https://as.example.com/token")
        #expect(decoded.claims.iat == 1_700_000_000)
        #expect(decoded.claims.nonce == "n-1")
        #expect(decoded.claims.ath == nil)
        #expect(decoded.claims.jti.count >= 22)
        // The signature verifies with the public key in the header, and only with it.
        let x = try #require(Base64URL.decode(jwk["x"]!)), y = try #require(Base64URL.decode(jwk["y"]!))
        let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: decoded.signature)
        #expect(publicKey.isValidSignature(signature, for: Data(decoded.signingInput.utf8)))
        #expect(!publicKey.isValidSignature(signature, for: Data((decoded.signingInput + "x").utf8)))
        #expect(!StateProofKey().publicKey.x.isEmpty)
    }

    /// `ath` is base64url(SHA-256(access token)) (RFC 9449 §4.2).
    @Test func resourceProofBindsTheToken() async throws {
        let proof = try await DPoPProof.make(
            key: StateProofKey(), method: "GET", url: "https://rs.example.com/resource", nonce: nil,
            accessToken: "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU", now: 1_700_000_000)
        let claims = try decode(proof).claims
        #expect(claims.ath == Base64URL.encode(SHA256.hash(data: Data("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU".utf8))))
        #expect(claims.nonce == nil)
    }

    @Test func everyProofHasItsOwnJTI() async throws {
        let key = StateProofKey()
        var seen = Set<String>()
        for _ in 0..<50 {
            let proof = try await DPoPProof.make(key: key, method: "POST", url: "https://as.example.com/token", nonce: nil, now: 1e9)
            seen.insert(try decode(proof).claims.jti)
        }
        #expect(seen.count == 50)
    }

    @Test(arguments: ["", "GE T", "GET\r\n", "PÖST"])
    func badMethodsAreRefused(_ method: String) async {
        await #expect(throws: ProofError.self) {
            _ = try await DPoPProof.make(key: StateProofKey(), method: method, url: "https://as.example.com/", nonce: nil, now: 1e9)
        }
    }

    @Test(arguments: ["", "a\"b", "a\\b", "with space"])
    func badNoncesAreRefused(_ nonce: String) async {
        await #expect(throws: ProofError.self) {
            _ = try await DPoPProof.make(key: StateProofKey(), method: "GET", url: "https://as.example.com/", nonce: nonce, now: 1e9)
        }
    }

    /// A state key survives its round trip through the state file.
    @Test func stateKeyRoundTrip() async throws {
        let key = StateProofKey()
        let again = try StateKeyStore().load(stored: key.stored)
        #expect(again.thumbprint == key.thumbprint)
        #expect(throws: ProofKeyError.self) { try StateKeyStore().load(stored: [1, 2, 3]) }
    }
}

@Suite struct ProofServersTests {
    @Test func noncesAreKeptPerServer() {
        let servers = ProofServers()
        servers.keep(nonce: "abc", for: "https://a.example")
        servers.keep(nonce: "bad nonce", for: "https://a.example")
        #expect(servers.nonce(for: "https://a.example") == "abc")
        #expect(servers.nonce(for: "https://b.example") == nil)
        servers.keep(nonce: "def", for: "https://a.example")
        #expect(servers.nonce(for: "https://a.example") == "def")
    }

    @Test func clockSkewFollowsTheDateHeader() {
        let servers = ProofServers()
        servers.observe(serverTime: 1_000_300, localTime: 1_000_000, for: "https://a.example")
        #expect(servers.serverTime(for: "https://a.example", localTime: 2_000_000) == 2_000_300)
        // Within the header's resolution: no skew.
        servers.observe(serverTime: 1_000_001, localTime: 1_000_000, for: "https://a.example")
        #expect(servers.skew(for: "https://a.example") == 0)
        #expect(servers.unfollowedSkew(for: "https://a.example") == nil)
        // Beyond the bound (ProofServers.followedSkew): not followed, only named.
        servers.observe(serverTime: 999_000, localTime: 1_000_000, for: "https://a.example")
        #expect(servers.skew(for: "https://a.example") == 0)
        #expect(servers.unfollowedSkew(for: "https://a.example") == -1000)
        servers.observe(serverTime: 999_701, localTime: 1_000_000, for: "https://a.example")
        #expect(servers.skew(for: "https://a.example") == -299)
        #expect(servers.unfollowedSkew(for: "https://a.example") == nil)
    }
}
