import Foundation
import JWTKit
import Secrets
import Testing
import _CryptoExtras
@testable import OAuth

/// ID tokens signed here with a fresh RSA key, checked against a JWKS made from it.
@Suite struct IDTokenTests {
    static let issuer = "https://id.example.com"
    let keys = JWTKeyCollection()
    let jwks: [UInt8]

    init() async throws {
        let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
        await keys.add(rsa: key, digestAlgorithm: .sha256, kid: "k1")
        let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
        jwks = Array(#"{"keys":[{"kty":"RSA","kid":"k1","alg":"RS256","use":"sig","n":"\#(base64URL(modulus))","e":"\#(base64URL(exponent))"}]}"#.utf8)
    }

    func token(iss: String = issuer, aud: [String] = ["client"], exp: Date = Date().addingTimeInterval(300),
               nonce: String? = "n1", azp: String? = nil, iat: Date? = nil, nbf: Date? = nil) async throws -> Secret {
        let claims = IDTokenClaims(
            iss: IssuerClaim(value: iss), sub: SubjectClaim(value: "42"), aud: AudienceClaim(value: aud),
            exp: ExpirationClaim(value: exp), iat: iat.map { IssuedAtClaim(value: $0) },
            nbf: nbf.map { NotBeforeClaim(value: $0) }, azp: azp, nonce: nonce, preferredUsername: "alice",
            email: "a@example.test")
        return Secret(try await keys.sign(claims, kid: "k1"))
    }

    var verifier: IDTokenVerifier { IDTokenVerifier(issuer: Self.issuer, clientID: "client", jwks: jwks) }

    @Test func validTokenGivesTheIdentity() async throws {
        let identity = try await verifier.verify(try await token(), nonce: "n1")
        #expect(identity == Identity(subject: "42", username: "alice", email: "a@example.test"))
    }

    @Test func wrongClaimsAreRefused() async throws {
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(iss: "https://evil.example"), nonce: "n1") }
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(aud: ["other"]), nonce: "n1") }
        await #expect(throws: IDTokenError.self) {
            try await verifier.verify(try await token(aud: ["client", "other"], azp: "other"), nonce: "n1")
        }
        await #expect(throws: IDTokenError.self) {
            try await verifier.verify(try await token(exp: Date().addingTimeInterval(-120)), nonce: "n1")
        }
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(), nonce: "n2") }
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(nonce: nil), nonce: "n1") }
    }

    @Test func severalAudiencesNeedAnAzpNamingThisClient() async throws {
        await #expect(throws: IDTokenError.self) {
            try await verifier.verify(try await token(aud: ["client", "other"]), nonce: "n1")
        }
        _ = try await verifier.verify(try await token(aud: ["client", "other"], azp: "client"), nonce: "n1")
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(azp: "other"), nonce: "n1") }
    }

    @Test func aTokenFromTheFutureIsRefused() async throws {
        let later = Date().addingTimeInterval(600)
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(iat: later), nonce: "n1") }
        await #expect(throws: IDTokenError.self) { try await verifier.verify(try await token(nbf: later), nonce: "n1") }
        let now = Date().addingTimeInterval(30)  // within the skew allowance
        _ = try await verifier.verify(try await token(iat: now, nbf: now), nonce: "n1")
    }

    @Test func aTokenFromAnotherKeyIsRefused() async throws {
        let other = JWTKeyCollection()
        await other.add(
            rsa: try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048)), digestAlgorithm: .sha256,
            kid: "k1")
        let claims = IDTokenClaims(
            iss: IssuerClaim(value: Self.issuer), sub: SubjectClaim(value: "42"), aud: AudienceClaim(value: ["client"]),
            exp: ExpirationClaim(value: Date().addingTimeInterval(300)), nonce: "n1")
        let forged = Secret(try await other.sign(claims, kid: "k1"))
        await #expect(throws: IDTokenError.self) { try await verifier.verify(forged, nonce: "n1") }
        // Unsigned ("alg": "none") is refused too.
        let parts = forged.reveal().split(separator: ".")
        let none = Secret(base64URL(Data(#"{"alg":"none","kid":"k1"}"#.utf8)) + "." + parts[1] + ".")
        await #expect(throws: IDTokenError.self) { try await verifier.verify(none, nonce: "n1") }
    }

    @Test func userInfoNeedsASubject() {
        #expect(Identity.fromUserInfo(Array(#"{"sub":"1","preferred_username":"alice"}"#.utf8))
            == Identity(subject: "1", username: "alice"))
        #expect(Identity.fromUserInfo(Array(#"{"email":"x"}"#.utf8)) == nil)
    }

    /// exp and iat are outside numbers: signed ID tokens with any of them are
    /// refused or accepted, never a trap.
    @Test(arguments: [1e300, -1e300, 1e19, 10_000_000_000_000.0])
    func absurdTimesInAnIDTokenNeverTrap(seconds: Double) async throws {
        let far = Date(timeIntervalSince1970: seconds)
        _ = try? await verifier.verify(try await token(exp: far), nonce: "n1")
        _ = try? await verifier.verify(try await token(iat: far), nonce: "n1")
        _ = try? await verifier.verify(try await token(nbf: far), nonce: "n1")
    }

    /// JWT.expiry reads an access token's exp: any number, held to 0...year 9999.
    @Test(arguments: [
        ("1e300", JWT.latestExpiry), ("-1e300", 0), ("1e19", JWT.latestExpiry), ("10000000000000", JWT.latestExpiry),
        ("9223372036854775807", JWT.latestExpiry), ("1700000000", 1_700_000_000), ("-5", 0),
    ])
    func anAccessTokensExpIsHeldToTheCalendar(exp: String, expected: Int) {
        let payload = base64URL(Data("{\"exp\":\(exp)}".utf8))
        #expect(JWT.expiry(of: base64URL(Data(#"{"alg":"none"}"#.utf8)) + "." + payload + ".sig") == expected)
    }
}
