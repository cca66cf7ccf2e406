import NIOHTTP1
import Testing

@testable import tokend_proxy

/// What crosses the proxy of a message's headers, and the path rule's fast case.
@Suite struct HeaderTests {
    @Test func hopByHopHeadersAndThoseConnectionNamesStay() {
        let headers = HTTPHeaders([
            ("Connection", " Keep-Alive , X-Private\t"), ("Keep-Alive", "timeout=5"), ("X-Private", "1"),
            ("Transfer-Encoding", "chunked"), ("TE", "trailers"), ("Upgrade", "h2c"), ("Proxy-Authorization", "Basic x"),
            ("Content-Type", "text/plain"), ("X-Kept", "2"),
        ])
        let passed = Headers.endToEnd(headers)
        #expect(passed.map(\.name) == ["Content-Type", "X-Kept"])
        #expect(Headers.connectionOptions(" Keep-Alive , X-Private\t,,") == ["keep-alive", "x-private"])
        #expect(Headers.endToEnd(HTTPHeaders([("Connection", "Keep-Alive"), ("X", "1")])).map(\.name) == ["X"])
        #expect(Headers.endToEnd(HTTPHeaders([("Connection", "close, X"), ("X", "1"), ("Y", "2")])).map(\.name) == ["Y"])
    }

    @Test func theClientsCredentialsAndHostAreReplaced() {
        let headers = HTTPHeaders([
            ("Host", "127.0.0.1:8080"), ("Authorization", "Bearer mine"), ("cookie", "mine=1"), ("Expect", "100-continue"),
            ("Accept", "*/*"),
        ])
        let passed = Headers.forwarded(headers, host: "api.example.com", authorization: "Bearer tokend", cookies: "a=1")
        #expect(passed.map { "\($0.name): \($0.value)" } == [
            "Accept: */*", "Host: api.example.com", "Authorization: Bearer tokend", "Cookie: a=1",
        ])
        #expect(!Headers.forwarded(headers, host: "h", authorization: "Bearer t", cookies: "").contains(name: "Cookie"))
    }

    @Test func aValueThatWouldEndItsHeaderIsRefused() {
        #expect(Headers.isFieldValue("Bearer abc.DEF-_~+/=\t"))
        for bad in ["Bearer a\r\nX-Injected: 1", "a\nb", "a\0b", "a\u{7F}b"] {
            #expect(!Headers.isFieldValue(bad), "\(bad.debugDescription)")
        }
    }

    /// Every target the one-pass check calls plain is its own normal form under the whole rule:
    /// 20,000 targets drawn from the characters the rule cares about.
    @Test func thePlainCaseAgreesWithTheWholeRule() {
        var generator = SplitMix(seed: 32)
        let pieces = ["/", "a", ".", "..", "%2e", "%2F", "%", ";", "\\", "?", "x=/../", "b%20c", "~"]
        var plain = 0
        for _ in 0..<20_000 {
            let count = Int(generator.next() % 8) + 1
            let target = "/" + (0..<count).map { _ in pieces[Int(generator.next() % UInt64(pieces.count))] }.joined()
            guard RequestPath.isPlain(target) else { continue }
            plain += 1
            #expect((try? RequestPath.dotSegmentsRemoved(target).get()) == target, "\(target)")
        }
        #expect(plain > 1_000)
        #expect(!RequestPath.isPlain("/a/./b") && !RequestPath.isPlain("/a/%2e%2e") && !RequestPath.isPlain("/a;x"))
        #expect(RequestPath.isPlain("/v1/items?x=/../y") && RequestPath.isPlain("/v1/a.b/c"))
    }
}

/// A small deterministic generator (SplitMix64), so that a failure repeats.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
