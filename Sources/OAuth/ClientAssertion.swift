#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import JWTKit
import Secrets

/// A client's private key for `private_key_jwt` (RFC 7523 §2.2, OpenID Connect
/// Core §9): EC P-256, signing ES256, or RSA of 2048 bits or more, signing RS256.
public struct ClientKey: Sendable {
    enum Material: Sendable {
        case ec(ES256PrivateKey)
        case rsa(Insecure.RSA.PrivateKey)
    }

    let material: Material
    /// Sent as the assertion's `kid` header, for providers that hold several keys of a client.
    public let keyID: String?

    /// `pem`: a PKCS #8, SEC 1 or PKCS #1 private key, as `openssl genpkey` writes it.
    public init(pem: String, keyID: String?) throws(ClientKeyError) {
        self.keyID = keyID
        if let key = try? ES256PrivateKey(pem: pem) {
            material = .ec(key)
        } else if let key = try? Insecure.RSA.PrivateKey(pem: pem) {
            material = .rsa(key)
        } else {
            throw ClientKeyError("is not a PEM EC P-256 private key or RSA private key of at least 2048 bits")
        }
    }

    /// The key in `path` (a file of its own or a systemd credential).
    public init(file path: String, keyID: String?) throws(ClientKeyError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ClientKeyError("\(path) cannot be read")
        }
        do {
            try self.init(pem: String(decoding: data, as: UTF8.self), keyID: keyID)
        } catch {
            throw ClientKeyError("\(path) \(error.description)")
        }
    }

    /// "ES256" or "RS256".
    public var algorithm: String {
        switch material {
        case .ec: "ES256"
        case .rsa: "RS256"
        }
    }
}

/// Why a client key cannot be used; names the file, never its content.
public struct ClientKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The claims of a client assertion (RFC 7523 §3): the client speaks for
/// itself (`iss` = `sub` = client id) to one audience, once, briefly.
struct ClientAssertionClaims: JWTPayload, Equatable {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var jti: IDClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}

extension ClientCredentials {
    /// Why these credentials cannot sign an assertion, checked once at start
    /// (and by --check-config) by the same rule every request applies; nil when usable.
    public var unusable: String? {
        do {
            _ = try assertionSigner()
            return nil
        } catch {
            return error.reason
        }
    }

    /// What signs this client's assertions; nil when it authenticates otherwise.
    /// A missing key or secret is tokend's own problem, not the provider's
    /// refusal: transient, so the session keeps its grant until it is fixed.
    func assertionSigner() throws(TokenEndpointError) -> AssertionSigner? {
        switch authentication {
        case .privateKeyJWT:
            guard let key else { throw .transient("private-key-jwt: no client key is loaded") }
            return .key(key)
        case .secretJWT:
            guard let secret, !secret.reveal().isEmpty else {
                throw .transient("secret-jwt: no client secret is loaded")
            }
            // RFC 7518 §3.2: an HS256 key has at least 256 bits (jwt-kit traps on shorter ones).
            let length = secret.reveal().utf8.count
            guard length >= 32 else {
                throw .transient("secret-jwt needs a client secret of at least 32 bytes (RFC 7518 §3.2); this one has \(length)")
            }
            return .secret(secret)
        case .basic, .post, .none:
            return nil
        }
    }
}

/// A client assertion's signer: the client's private key (`private-key-jwt`,
/// ES256 or RS256) or its shared secret (`secret-jwt`, HS256; at least 32
/// bytes, which `ClientCredentials.assertionSigner` checks).
public enum AssertionSigner: Sendable {
    case key(ClientKey)
    case secret(Secret)

    /// RFC 7523 §2.2's assertion type.
    static let assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    /// How long an assertion is good for: long enough for one request to arrive, short enough that
    /// one read from a log or a proxy is spent by the time anyone could replay it.
    static let lifetime: TimeInterval = 60

    /// The form fields that authenticate `clientID` by a new signed assertion.
    /// Each call makes one with its own `jti`, because providers keep spent ones
    /// and refuse them. `audience`: the URL of the endpoint the request goes to.
    /// For the token endpoint that is the audience OpenID Connect Core §9
    /// names; at the device, revocation and PAR endpoints Glewlwyd and Okta
    /// accept only their own URL (Glewlwyd refuses the token endpoint's there).
    public func fields(clientID: String, audience: URL, now: Date = Date()) async throws(TokenEndpointError)
        -> [(String, String)]
    {
        let keys = JWTKeyCollection()
        var kid: JWKIdentifier?
        switch self {
        case .key(let key):
            kid = key.keyID.map { JWKIdentifier(string: $0) }
            switch key.material {
            case .ec(let ec): await keys.add(ecdsa: ec, kid: kid)
            case .rsa(let rsa): await keys.add(rsa: rsa, digestAlgorithm: .sha256, kid: kid)
            }
        case .secret(let secret):
            await keys.add(hmac: HMACKey(from: Data(secret.reveal().utf8)), digestAlgorithm: .sha256)
        }
        // Whole seconds: some providers read a NumericDate as an integer only.
        let issued = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = ClientAssertionClaims(
            iss: IssuerClaim(value: clientID), sub: SubjectClaim(value: clientID),
            aud: AudienceClaim(value: audience.absoluteString), jti: IDClaim(value: randomToken()),
            iat: IssuedAtClaim(value: issued), exp: ExpirationClaim(value: issued + Self.lifetime))
        do {
            let assertion = try await keys.sign(claims, kid: kid)
            return [("client_assertion_type", Self.assertionType), ("client_assertion", assertion)]
        } catch {
            throw .transient("the client assertion could not be signed")
        }
    }
}
