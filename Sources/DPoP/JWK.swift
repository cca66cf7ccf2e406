import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The public half of a P-256 key as a JWK (RFC 7518 §6.2.1): what a proof's
/// header carries and what its thumbprint is taken of.
public struct P256PublicJWK: Sendable, Equatable, Codable {
    public var kty = "EC"
    public var crv = "P-256"
    /// The coordinates, base64url of 32 bytes each.
    public var x: String
    public var y: String

    /// `point`: the uncompressed (x || y, 64 bytes) or X9.63 (0x04 || x || y) form.
    public init?(point: [UInt8]) {
        let raw = point.count == 65 && point.first == 0x04 ? Array(point.dropFirst()) : point
        guard raw.count == 64 else { return nil }
        x = Base64URL.encode(raw[0..<32])
        y = Base64URL.encode(raw[32..<64])
    }

    public init(_ key: P256.Signing.PublicKey) {
        let raw = Array(key.rawRepresentation)
        x = Base64URL.encode(raw[0..<32])
        y = Base64URL.encode(raw[32..<64])
    }

    /// RFC 7638: base64url(SHA-256) of the required members in lexicographic order.
    public var thumbprint: String {
        JWKThumbprint.sha256(of: ["crv": crv, "kty": kty, "x": x, "y": y])
    }
}

/// RFC 7638 JWK thumbprints, for any key type: the caller passes exactly the
/// required members of its key type (§3.2), all of them strings.
public enum JWKThumbprint {
    public static func sha256(of requiredMembers: [String: String]) -> String {
        // Member names and values of every key type RFC 7638 covers are
        // ASCII with nothing to escape; escaping is done anyway, as JSON requires.
        let members = requiredMembers.keys.sorted().map { "\(quoted($0)):\(quoted(requiredMembers[$0]!))" }
        let canonical = "{" + members.joined(separator: ",") + "}"
        return Base64URL.encode(SHA256.hash(data: Data(canonical.utf8)))
    }

    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
