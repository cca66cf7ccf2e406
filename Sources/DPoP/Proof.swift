import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A DPoP proof JWT (RFC 9449 §4.2) for one HTTP request.
public enum DPoPProof {
    struct Header: Encodable {
        var typ = "dpop+jwt"
        var alg = "ES256"
        var jwk: P256PublicJWK
    }

    /// The claims: a fresh `jti`, the request's method and target, the time,
    /// the server's nonce when it gave one, and `ath` when the proof goes
    /// with an access token to a resource server.
    public struct Claims: Codable, Sendable, Equatable {
        public var jti: String
        public var htm: String
        public var htu: String
        public var iat: Int
        public var nonce: String?
        public var ath: String?
    }

    /// Signs a proof for `method` on `url` at `now` (Unix seconds, already
    /// corrected for the server's clock). `accessToken`: the token the
    /// request carries (`ath`); nil at the token endpoint.
    public static func make(
        key: any ProofKey, method: String, url: String, nonce: String?, accessToken: String? = nil, now: Double,
        jti: String = randomJTI()
    ) async throws(ProofError) -> String {
        let claims = try claims(method: method, url: url, nonce: nonce, accessToken: accessToken, now: now, jti: jti)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let header = try? encoder.encode(Header(jwk: key.publicKey)), let payload = try? encoder.encode(claims) else {
            throw ProofError("the proof could not be encoded")
        }
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        let signature: [UInt8]
        do {
            signature = try await key.sign(Array(signingInput.utf8))
        } catch {
            throw ProofError(error.description, key: error)
        }
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The claims `make` signs, checked: an HTTP method token and an http(s) URL.
    public static func claims(
        method: String, url: String, nonce: String?, accessToken: String?, now: Double, jti: String
    ) throws(ProofError) -> Claims {
        guard !method.isEmpty, method.utf8.count <= 32, method.allSatisfy(isTokenCharacter) else {
            throw ProofError("\"\(method.prefix(40))\" is not an HTTP method")
        }
        if let nonce, nonce.isEmpty || nonce.utf8.count > maximumNonce || !nonce.allSatisfy(isNonceCharacter) {
            throw ProofError("the DPoP nonce is not a token the proof can carry")
        }
        guard now.isFinite, now > 0, now < 253_402_300_800 else { throw ProofError("the clock reads no usable time") }
        return Claims(
            jti: jti, htm: method, htu: try TargetURI.htu(url), iat: Int(now), nonce: nonce,
            ath: accessToken.map { Base64URL.encode(SHA256.hash(data: Data($0.utf8))) })
    }

    /// The longest nonce (bytes) a proof carries, and so the longest one kept
    /// from a server: a nonce no proof can carry would only be refused.
    /// tokend-proxy keeps to the same figure (GetProof's).
    public static let maximumNonce = 1024

    /// 16 random bytes, base64url: unique per proof.
    public static func randomJTI() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// RFC 9110 §5.6.2 tchar.
    static func isTokenCharacter(_ character: Character) -> Bool {
        guard let ascii = character.asciiValue else { return false }
        return (ascii >= 0x30 && ascii <= 0x39) || (ascii >= 0x41 && ascii <= 0x5A) || (ascii >= 0x61 && ascii <= 0x7A)
            || "!#$%&'*+-.^_`|~".utf8.contains(ascii)
    }

    /// RFC 9449 §8.1: nonce = 1*NQCHAR (visible ASCII but '"' and '\').
    static func isNonceCharacter(_ character: Character) -> Bool {
        guard let ascii = character.asciiValue else { return false }
        return ascii >= 0x21 && ascii <= 0x7E && ascii != 0x22 && ascii != 0x5C
    }
}

extension ProofError {
    /// A proof the key could not sign; `keyError` says why.
    public init(_ description: String, key: ProofKeyError) {
        self.description = description
        self.keyError = key
    }
}
