#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// base64url without padding (RFC 7515 §2), as JWS and JWK use it.
public enum Base64URL {
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let base64 = Data(bytes).base64EncodedString().utf8
        return String(decoding: base64.compactMap { $0 == UInt8(ascii: "=") ? nil : urlSafe[$0] ?? $0 }, as: UTF8.self)
    }

    /// nil when `text` is not base64url (padding is accepted, not required).
    public static func decode(_ text: String) -> [UInt8]? {
        var base64 = text.utf8.map { standard[$0] ?? $0 }
        while base64.count % 4 != 0 { base64.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(base64)).map(Array.init)
    }

    private static let urlSafe: [UInt8: UInt8] = [UInt8(ascii: "+"): UInt8(ascii: "-"), UInt8(ascii: "/"): UInt8(ascii: "_")]
    private static let standard: [UInt8: UInt8] = [UInt8(ascii: "-"): UInt8(ascii: "+"), UInt8(ascii: "_"): UInt8(ascii: "/")]
}
