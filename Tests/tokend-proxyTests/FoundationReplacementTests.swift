import Foundation
import Loopback
import Testing
import Varlink

@testable import TokendClient
@testable import ProxyProgram

/// tokend-proxy, Loopback and TokendClient do without Foundation; each call that replaced one of
/// Foundation's answers as Foundation did, over well-formed and malformed inputs alike.
@Suite struct FoundationReplacementTests {
    static let percentEncoded = [
        "", "abc", "%41", "%4a%4A", "a%20b", "%", "%4", "a%", "%%", "%%41", "%4%41", "%zz", "%G0", "%0g", "%25",
        "%2e%2E", "..%2f..", "%00", "a%00b", "%C3%A9", "%c3%a9", "%C3", "%C3%", "%C3%28", "%C0%AF", "%ED%A0%80",
        "%F4%90%80%80", "%EF%BF%BE", "%80", "%FF", "%E2%82%AC", "%F0%9F%98%80", "%F0%9F%98", "é%20", "e\u{301}%2e",
        "+%2B", "%\u{E9}1", "%1\u{E9}", "a b%20c", "%2e\u{301}", "🙂%41", "%C3%A9%C3",
    ]

    @Test(arguments: percentEncoded) func percentDecodedAsFoundation(_ text: String) {
        #expect(text.percentDecoded == text.removingPercentEncoding)
        let slice = ("/" + text + "/").dropFirst().dropLast()
        #expect(slice.percentDecoded == slice.removingPercentEncoding)
    }

    @Test(arguments: [
        "", "[", "]", "[]", "][", "[[::1]]", "[::1]", "::1", "a]b[", "]a[", "[a", "b]", "[\u{301}x]", "x[\u{301}]",
        "é", "[é]", " [a] ", "[ a ]", "[[[", "a[b]c",
    ])
    func unbracketedAsFoundation(_ text: String) {
        #expect(unbracketed(text) == text.trimmingCharacters(in: CharacterSet(charactersIn: "[]")))
    }

    /// Foundation compared the token type case-insensitively over all of Unicode; no string but an
    /// ASCII spelling of "DPoP" is equal to it that way, so the ASCII comparison answers the same.
    @Test(arguments: [
        "DPoP", "dpop", "DPOP", "dPoP", "Bearer", "", "DPoP ", " DPoP", "DPo", "DPoPx", "ＤＰｏＰ", "DPo\u{420}",
        "DPo\u{301}P", "D\u{200B}PoP", "\u{1E0A}PoP", "DP\u{F8}P", "DP\u{D2}P", "DPoP\0",
    ])
    func dpopBoundAsFoundation(_ type: String) {
        let token = AccessToken(accessToken: "t", tokenType: type, expiresAt: 0, generation: 1, scope: nil)
        #expect(token.isDPoPBound == (type.caseInsensitiveCompare("DPoP") == .orderedSame))
    }

    /// RequestPath's NUL and double-encoding checks find a needle where Foundation's `range(of:)` did.
    @Test(arguments: [
        "", "a", "a\0b", "\0", "%2e", "%2E", "x%2Fy", "%5c", "%3B", "%2e\u{301}", "%2\u{301}e", "%25",
        "%2", "é%2e", "%2f%2f", "a%3", "..", "%2ea", "\u{301}%2e",
    ])
    func requestPathNeedlesAsFoundation(_ decoded: String) {
        let lowered = decoded.lowercased()
        let foundation =
            decoded.range(of: "\0") != nil || ["%2e", "%2f", "%5c", "%3b"].contains { lowered.range(of: $0) != nil }
        let reason = RequestPath.hidden(in: decoded)
        let found = reason.map { $0.hasPrefix("the path has a NUL") || $0.hasPrefix("the path is encoded twice") } ?? false
        #expect(found == foundation)
    }

    /// Where they differ, the new check is the stricter: Foundation's `range(of: "\0")` missed a NUL that
    /// a combining mark follows (it compares composed sequences), so such a segment passed the NUL check.
    @Test func aNULBeforeACombiningMarkIsFoundNow() {
        #expect("\0\u{301}".range(of: "\0") == nil)
        #expect(RequestPath.hidden(in: "\0\u{301}") == "the path has a NUL (%00)")
        #expect((try? RequestPath.normalized("/a/%00%CC%81/b").get()) == nil)
    }

    struct TextError: Error, CustomStringConvertible { let description: String }

    /// TokendClient's reading of a connection error finds its words where Foundation's `range(of:)` did.
    @Test(arguments: [
        "", "connect(descriptor:addr:size:): No such file or directory (errno: 2)", "ENOENT", "ECONNREFUSED",
        "Connection refused", "Permission denied", "EACCES", "connection reset (error set): x", "EPIPE",
        "Broken pipe", "no such file", "reset\u{301}", "ÉNOENT", "E\u{301}NOENT", "timeout",
    ])
    func connectErrorWordsAsFoundation(_ text: String) {
        func has(_ words: String...) -> Bool { words.contains { text.range(of: $0) != nil } }
        let foundation =
            has("No such file", "ENOENT") ? "no socket there (is tokend running?)"
            : has("Connection refused", "ECONNREFUSED") ? "connection refused (tokend is not running)"
            : has("Permission denied", "EACCES") ? "permission denied (is this user in the socket's group?)"
            : has("reset", "EPIPE", "Broken pipe") ? "tokend closed the connection" : "the connection failed"
        #expect(describeConnectError(TextError(description: text)) == foundation)
    }

    /// The JSON-RPC error body as JSONSerialization wrote it (sorted keys, slashes as they are).
    @Test(arguments: [
        "tokend-proxy: session alice/mcp needs a login", "", "quote \" and \\ back", "tab\tnew\nline\r",
        "é 🙂 \u{2028}", "ctl \u{1}\u{1F}",
    ])
    func jsonRPCErrorAsFoundation(_ message: String) throws {
        let object: [String: Any] = [
            "jsonrpc": "2.0", "id": NSNull(),
            "error": ["code": Answer.jsonRPCCode, "message": message, "data": ["status": 503]] as [String: Any],
        ]
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        #expect(Answer.jsonRPCError(message: message, status: 503) == String(decoding: data, as: UTF8.self))
    }
}
