import Foundation

/// Reads the `exp` claim of a JWT without verifying it: used only to learn
/// when an access token expires when the token response omits `expires_in`.
public enum JWT {
    public static func expiry(of token: String) -> Int? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64),
            let claims = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
            let exp = claims["exp"] as? NSNumber, let seconds = jsonInteger(exp)
        else { return nil }
        return seconds
    }
}
