import Foundation
import Testing

@testable import Config

/// Config does without Foundation's CharacterSet; its session-name rule answers as it did.
@Suite struct ConfigFoundationReplacementTests {
    @Test func asciiAlphanumericsAsFoundation() {
        for value in UInt32(0)..<0x2000 {
            let scalar = Unicode.Scalar(value)!
            #expect(
                Configuration.isASCIIAlphanumeric(scalar) == (scalar.isASCII && CharacterSet.alphanumerics.contains(scalar)),
                "U+\(String(value, radix: 16))")
        }
    }

    @Test(arguments: [
        "default", "a", "A-b_c.d", "9lives", "-a", "_a", ".a", "", "a b", "a/b", "é", "aé", "a\u{301}", "ａ", "٣", "a٣",
        "a\u{0}", String(repeating: "a", count: 64), String(repeating: "a", count: 65), "Ⅻ", "a\u{200B}", "a-", "a..b",
    ])
    func sessionNamesAsFoundation(_ name: String) {
        func foundation(_ name: String) -> Bool {
            guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 64,
                CharacterSet.alphanumerics.contains(first), first.isASCII
            else { return false }
            return name.unicodeScalars.allSatisfy {
                $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0))
            }
        }
        #expect(Configuration.isValidSessionName(name) == foundation(name))
    }
}
