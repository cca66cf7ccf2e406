import JWTKit

/// Reads the `exp` claim of a JWT without verifying it (jwt-kit's parser):
/// used only to learn when an access token expires when the token response
/// omits `expires_in`.
public enum JWT {
    struct Expiry: JWTPayload {
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    public static func expiry(of token: String) -> Int? {
        guard let payload = try? DefaultJWTParser().parse(Array(token.utf8), as: Expiry.self).payload else { return nil }
        return Int(payload.exp.value.timeIntervalSince1970)
    }
}
