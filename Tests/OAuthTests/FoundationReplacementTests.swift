import Foundation
import Loopback
import Testing

@testable import OAuth
@testable import Secrets

/// OAuth, Loopback's trimming and Secrets' percent-encoding do without Foundation; each call that
/// replaced one of Foundation's answers as Foundation did, over well-formed and malformed inputs
/// alike, or (where named) differs from it on purpose.
@Suite struct FoundationReplacementTests {
    static let blanks = [
        "", " ", "\t", "\n", "\r\n", " a ", "\ta\t", "\na\n", "\r\na b\r\n", "a", " a b ", "\u{A0}a\u{A0}",
        "\u{2003}x\u{3000}", "\u{85}x\u{2028}", "\u{2029}", "\u{B}\u{C}x", "\u{200B}x\u{200B}", "\u{FEFF}x",
        " \u{301}a", "a \u{301}", "a\u{301} ", "\u{1680}x\u{202F}\u{205F}", "\0x\0", " \u{7F} ", "é ", "  🙂  ",
        "\u{180E}x", "\u{E000}", " \t\n ", "x\n\n",
    ]

    @Test(arguments: blanks) func trimmingAsFoundation(_ text: String) {
        #expect(text.trimming(.whitespaces) == text.trimmingCharacters(in: .whitespaces))
        #expect(text.trimming(.newlines) == text.trimmingCharacters(in: .newlines))
        #expect(text.trimming(.whitespacesAndNewlines) == text.trimmingCharacters(in: .whitespacesAndNewlines))
        let slice = ("<" + text + ">").dropFirst().dropLast()
        #expect(slice.trimming(.whitespacesAndNewlines) == slice.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Every Unicode scalar is a blank where Foundation's sets have it, and nowhere else.
    @Test func blanksAreFoundationsSets() {
        let sets: [(Blanks, CharacterSet)] = [
            (.whitespaces, .whitespaces), (.newlines, .newlines), (.whitespacesAndNewlines, .whitespacesAndNewlines),
        ]
        for (blanks, foundation) in sets {
            let differing = (0...0x10FFFF).compactMap(Unicode.Scalar.init).filter {
                blanks.contains($0) != foundation.contains($0)
            }
            #expect(differing.isEmpty, "\(blanks): \(differing.map(\.value))")
        }
    }

    static let formValues = [
        "", "abc", "AZaz09", "-._~", "a b", "a+b", "a=b&c", "%", "%41", "/?#[]@", "!$'()*,;:", "\"<>\\^`{|}",
        "\0\u{1}\u{1F}\u{7F}", "rt/45chars+with=odd~bytes_and/slashes.0123456", "s3cr/t+pa ss=word", "é", "e\u{301}",
        "日本", "²", "ａ", "🙂 x", "\u{A0}", "Ω", "ß",
    ]

    @Test(arguments: formValues) func formEncodeAsFoundation(_ value: String) {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        #expect(FormRequest.formEncode(value) == value.addingPercentEncoding(withAllowedCharacters: allowed))
    }

    /// The JSON-escaped form of a secret is every "/" escaped. Foundation's `replacingOccurrences`
    /// skipped a "/" that a combining mark follows, where a JSON encoder escapes it all the same;
    /// the Redactor now finds that form too.
    @Test(arguments: ["", "a", "/", "a/b", "//", "\\/", "rt/45chars+with=odd~bytes_and/slashes.0123456", "é/ü"])
    func slashesEscapedAsFoundation(_ secret: String) {
        let escaped = String(decoding: Redactor.slashesEscaped(Array(secret.utf8)), as: UTF8.self)
        #expect(escaped == secret.replacingOccurrences(of: "/", with: "\\/"))
    }

    @Test func slashBeforeACombiningMarkIsEscapedNow() throws {
        let secret = "abcdefgh/\u{301}ijklmnopq"
        #expect(secret.replacingOccurrences(of: "/", with: "\\/") == secret)
        let json = String(decoding: try JSONEncoder().encode(["token": secret]), as: UTF8.self)
        #expect(Array(json.utf8).firstRange(of: Array(#"\/"#.utf8)) != nil)
        #expect(!Redactor([secret]).redact(json).contains("ijklmnopq"))
    }

    /// Header names are tokens (ASCII); they compare as Foundation's `caseInsensitiveCompare` did.
    @Test(arguments: [
        "Location", "location", "LOCATION", "Locatio", "Location ", "DPoP-Nonce", "dpop-nonce", "WWW-Authenticate",
        "www-authenticate", "Retry-After", "retry-after", "Content-Type", "", "Lоcation", "\u{212A}",
    ])
    func headerNamesAsFoundation(_ name: String) {
        let answer = OutboundAnswer(status: 200, headers: [(name, "v")], body: [], address: "")
        for asked in ["Location", "DPoP-Nonce", "WWW-Authenticate", "Retry-After", "Content-Type", "k"] {
            #expect((answer.header(asked) != nil) == (name.caseInsensitiveCompare(asked) == .orderedSame))
            #expect(answer.headers(asked).count == (name.caseInsensitiveCompare(asked) == .orderedSame ? 1 : 0))
        }
    }

    /// A pattern's scheme ends where Foundation's `range(of: "://")` found it.
    @Test(arguments: [
        "https://a.example/", "http://b.example", "://x", "https:/x", "https//x", "a://b://c", "https\u{301}://x",
        "https:\u{301}//x", "https://\u{301}x", "", "://",
    ])
    func patternSchemeAsFoundation(_ text: String) {
        let foundation = text.range(of: "://").map { String(text[..<$0.lowerBound]).lowercased() }
        let pattern = URLPattern(text)
        if let pattern { #expect(pattern.scheme == foundation) }
        if foundation == nil { #expect(pattern == nil) }
    }

    /// The authorization URL escapes '+' in its query as Foundation's `replacingOccurrences` did.
    @Test(arguments: ["openid", "a+b", "a b+c", "++", "é+ü", "x%2By"]) func plusEscapedAsFoundation(_ scope: String) throws {
        let endpoint = try #require(URL(string: "https://login.example/authorize?x=1+2"))
        let request = AuthorizationCodeLogin(redirectURI: "http://127.0.0.1:8400/cb")
        var components = try #require(URLComponents(url: endpoint, resolvingAgainstBaseURL: false))
        components.queryItems = (components.queryItems ?? [])
            + request.parameters(clientID: "c+d", scope: scope, resources: []).map { URLQueryItem(name: $0.0, value: $0.1) }
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        #expect(request.authorizationURL(endpoint: endpoint, clientID: "c+d", scope: scope) == components.url)
    }

    /// base64url as the Foundation-based code wrote it.
    @Test(arguments: [0, 1, 2, 3, 4, 5, 31, 32, 33, 64]) func base64URLAsFoundation(_ count: Int) {
        let data = Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 251) })
        let foundation = data.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        #expect(base64URL(data) == foundation)
    }
}
