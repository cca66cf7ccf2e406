import JWTKit

/// Reads the `exp` claim of a JWT without verifying it (jwt-kit's parser):
/// used only to learn when an access token expires when the token response
/// omits `expires_in`.
public enum JWT {
    struct Expiry: JWTPayload {
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// Unix seconds, or nil when the token is not a JWT with an `exp`. The
    /// claim is an outside number: one outside 0...latestExpiry (year 9999)
    /// is held to that range rather than converted (`Int(1e300)` traps).
    public static func expiry(of token: String) -> Int? {
        guard let payload = try? DefaultJWTParser().parse(Array(token.utf8), as: Expiry.self).payload else { return nil }
        let seconds = payload.exp.value.timeIntervalSince1970
        guard seconds.isFinite else { return nil }
        return Int(min(max(seconds, 0), Double(latestExpiry)))
    }

    /// 9999-12-31T23:59:59Z, the latest time a JWT's NumericDate is read as.
    public static let latestExpiry = 253_402_300_799
}
