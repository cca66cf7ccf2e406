import Foundation
import Testing

@testable import DPoP

/// DPoP does without Foundation; each call that replaced one of Foundation's answers as Foundation
/// did, over well-formed and malformed inputs alike.
@Suite struct FoundationReplacementTests {
    @Test(arguments: [0, 1, 2, 3, 4, 5, 31, 32, 33, 64, 65]) func encodeAsFoundation(_ count: Int) {
        let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 251) }
        let foundation = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        #expect(Base64URL.encode(bytes) == foundation)
        #expect(Base64URL.decode(foundation) == bytes)
    }

    @Test(arguments: [
        "", "A", "AA", "AAA", "AAAA", "AA==", "AA=", "A===", "-_-_", "+/+/", "a-b_", "ab cd", "ab\ncd", "ab%3D",
        "é", "abé", "ab\u{301}", "-\u{301}AA", "AAAA=", "====", "YQ", "YQ==", "YWI", "YWJj", "_w", "__8", "____",
        "\0AAA", "AA\u{FF0D}A", "\u{200B}YQ",
    ])
    func decodeAsFoundation(_ text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        #expect(Base64URL.decode(text) == Data(base64Encoded: base64).map(Array.init))
    }

    @Test func controlCharactersEscapedAsFoundation() {
        for value in UInt32(0)..<0x20 {
            let text = String(Unicode.Scalar(value)!)
            #expect(JWKThumbprint.quoted(text) == "\"" + String(format: "\\u%04x", value) + "\"")
        }
        #expect(JWKThumbprint.quoted("a\"b\\c\u{7F}é") == "\"a\\\"b\\\\c\u{7F}é\"")
    }
}
