#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import JWTKit
import Secrets

/// Who logged in, as the provider vouches for it.
public struct Identity: Sendable, Equatable, Codable {
    public var subject: String
    /// preferred_username
    public var username: String?
    public var email: String?

    public init(subject: String, username: String? = nil, email: String? = nil) {
        self.subject = subject
        self.username = username
        self.email = email
    }

    /// From a userinfo answer (OpenID Connect Core §5.3.2); nil without `sub`.
    public static func fromUserInfo(_ body: [UInt8]) -> Identity? {
        guard let json = providerObject(body), let subject = json["sub"]?.stringValue, !subject.isEmpty else { return nil }
        return Identity(
            subject: TokenResponse.sanitize(subject),
            username: json["preferred_username"]?.stringValue.map(TokenResponse.sanitize),
            email: json["email"]?.stringValue.map(TokenResponse.sanitize))
    }
}

/// Checks an ID token (OpenID Connect Core §3.1.3.7) with jwt-kit: the
/// signature against the issuer's JWKS, then `iss`, `aud` (and `azp` when
/// there are several audiences), `exp`, and `nonce` when one was sent.
public struct IDTokenVerifier: Sendable {
    public var issuer: String
    public var clientID: String
    /// The JWKS document's bytes.
    public var jwks: [UInt8]

    public init(issuer: String, clientID: String, jwks: [UInt8]) {
        self.issuer = issuer
        self.clientID = clientID
        self.jwks = jwks
    }

    public func verify(_ idToken: Secret, nonce: String?) async throws(IDTokenError) -> Identity {
        let keys = JWTKeyCollection()
        guard let set = try? JSONDecoder().decode(JWKS.self, from: Data(jwks)) else {
            throw IDTokenError("the issuer's JWKS is not a valid key set")
        }
        var usable = 0
        for key in set.keys where (try? await keys.add(jwk: key)) != nil { usable += 1 }
        guard usable > 0 else { throw IDTokenError("the issuer's JWKS has no key tokend can use") }
        let claims: IDTokenClaims
        do {
            claims = try await keys.verify(idToken.reveal(), as: IDTokenClaims.self)
        } catch let error as JWTError where error.errorType == .claimVerificationFailure {
            throw IDTokenError("the ID token has expired")
        } catch {
            throw IDTokenError("the ID token's signature does not verify against the issuer's keys")
        }
        guard claims.iss.value == issuer else {
            throw IDTokenError("the ID token's issuer is \"\(TokenResponse.sanitize(claims.iss.value))\", not \"\(issuer)\"")
        }
        guard claims.aud.value.contains(clientID) else { throw IDTokenError("the ID token is not meant for this client") }
        // OIDC Core §3.1.3.7: with several audiences, azp must be there and name this client.
        if claims.aud.value.count > 1 || claims.azp != nil, claims.azp != clientID {
            throw IDTokenError("the ID token was issued to another party (azp)")
        }
        let now = Date().timeIntervalSince1970
        if let issuedAt = claims.iat?.value.timeIntervalSince1970, issuedAt > now + IDTokenClaims.skew {
            throw IDTokenError("the ID token was issued in the future (iat)")
        }
        if let notBefore = claims.nbf?.value.timeIntervalSince1970, notBefore > now + IDTokenClaims.skew {
            throw IDTokenError("the ID token is not valid yet (nbf)")
        }
        if let nonce {
            guard let received = claims.nonce, constantTimeEqual(received, nonce) else {
                throw IDTokenError("the ID token's nonce does not match this login")
            }
        }
        return Identity(
            subject: TokenResponse.sanitize(claims.sub.value),
            username: claims.preferredUsername.map(TokenResponse.sanitize),
            email: claims.email.map(TokenResponse.sanitize))
    }
}

public struct IDTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    /// A token that fails verification refuses the login; a userinfo endpoint
    /// that cannot be read only leaves the identity unknown.
    public let refusesLogin: Bool
    public init(_ description: String, refusesLogin: Bool = true) {
        self.description = description
        self.refusesLogin = refusesLogin
    }
}

struct IDTokenClaims: JWTPayload {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var iat: IssuedAtClaim?
    var nbf: NotBeforeClaim?
    var azp: String?
    var nonce: String?
    var preferredUsername: String?
    var email: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, iat, nbf, azp, nonce, email
        case preferredUsername = "preferred_username"
    }

    /// The allowance for clock skew, either way.
    static let skew: Double = 60

    /// `exp` with the skew allowance (`iat` and `nbf` are checked by `verify(_:nonce:)`).
    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired(currentDate: Date().addingTimeInterval(-Self.skew))
    }
}
