import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import ProxyProgram

/// What crosses the proxy of a message's headers, and the path rule's fast case.
@Suite struct HeaderTests {
    func request(_ text: String) throws -> RequestHead { try RequestHead(ByteBuffer(string: text)) }

    func upstreamHead(_ head: RequestHead, cookies: String = "", length: Int? = nil, chunked: Bool = false) -> String {
        var bytes = ByteBuffer()
        let lines = Wire.credentialLines(host: "api.example.com", authorization: "Bearer tokend", cookies: cookies)
        bytes.writeUpstreamHead(head, uri: "/api/x", credentialLines: lines, length: length, chunked: chunked)
        return String(buffer: bytes)
    }

    @Test func hopByHopHeadersAndThoseConnectionNamesStay() throws {
        let head = try request(
            "GET /x HTTP/1.1\r\nConnection:  Keep-Alive , X-Private\t\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nTE: trailers\r\n"
                + "Upgrade: h2c\r\nProxy-Authorization: Basic x\r\nContent-Type: text/plain\r\nX-Kept: 2\r\n\r\n")
        #expect(head.fields.connectionNames == ["x-private"] && head.keepAlive)
        #expect(upstreamHead(head) == "GET /api/x HTTP/1.1\r\nContent-Type: text/plain\r\nX-Kept: 2\r\nHost: api.example.com\r\nAuthorization: Bearer tokend\r\n\r\n")
        // A request line that stays as it came is copied with the lines after it, around the ones dropped.
        var bytes = ByteBuffer()
        bytes.writeUpstreamHead(
            head, uri: "/x", credentialLines: Wire.credentialLines(host: "h", authorization: "Bearer t", cookies: ""), length: nil, chunked: false)
        #expect(String(buffer: bytes) == "GET /x HTTP/1.1\r\nContent-Type: text/plain\r\nX-Kept: 2\r\nHost: h\r\nAuthorization: Bearer t\r\n\r\n")
        let old = try request("GET /x HTTP/1.0\r\nA: 1\r\n\r\n")
        bytes.clear()
        bytes.writeUpstreamHead(
            old, uri: "/x", credentialLines: Wire.credentialLines(host: "h", authorization: "Bearer t", cookies: ""), length: nil, chunked: false)
        #expect(String(buffer: bytes).hasPrefix("GET /x HTTP/1.1\r\nA: 1\r\n"))
        let closing = try request("GET /x HTTP/1.1\r\nConnection: close, X\r\nX: 1\r\nY: 2\r\n\r\n")
        #expect(!closing.keepAlive)
        #expect(upstreamHead(closing).contains("\r\nY: 2\r\n") && !upstreamHead(closing).contains("X: 1"))
    }

    @Test func theClientsCredentialsHostAndFramingAreReplaced() throws {
        let head = try request(
            "POST /x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer mine\r\ncookie: mine=1\r\nExpect: 100-continue\r\n"
                + "Accept: */*\r\nContent-Length: 3\r\n\r\n")
        #expect(head.expectsContinue && head.contentLength == 3)
        #expect(upstreamHead(head, cookies: "a=1", length: 3) == "POST /api/x HTTP/1.1\r\nAccept: */*\r\nHost: api.example.com\r\n"
            + "Authorization: Bearer tokend\r\nCookie: a=1\r\nContent-Length: 3\r\n\r\n")
        #expect(upstreamHead(head, chunked: true).hasSuffix("Transfer-Encoding: chunked\r\n\r\n"))
    }

    @Test func theClientGetsTheAnswersEndToEndFieldsInItsVersion() throws {
        let answer = try ResponseHead(
            ByteBuffer(string: "HTTP/1.1 201 Created\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n"
                + "Set-Cookie: a=1\r\nX-Kept: 2\r\n\r\n"), toHead: false)
        var bytes = ByteBuffer()
        bytes.writeClientHead(answer, version: .http1_1, chunked: true, close: false)
        #expect(String(buffer: bytes) == "HTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nX-Kept: 2\r\nTransfer-Encoding: chunked\r\n\r\n")
        bytes.clear()
        bytes.writeClientHead(answer, version: .http1_0, chunked: false, close: true)
        #expect(String(buffer: bytes) == "HTTP/1.0 201 Created\r\nSet-Cookie: a=1\r\nX-Kept: 2\r\nConnection: close\r\n\r\n")
        bytes.clear()
        bytes.writeClientHead(answer, version: .http1_0, chunked: false, close: false)
        #expect(String(buffer: bytes).hasSuffix("Connection: keep-alive\r\n\r\n"))
        let old = try ResponseHead(ByteBuffer(string: "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"), toHead: false)
        bytes.clear()
        bytes.writeClientHead(old, version: .http1_1, chunked: false, close: true)
        #expect(String(buffer: bytes) == "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        // A Connection header may not take a message's length off its hop: the client would lose its framing.
        let framed = try ResponseHead(ByteBuffer(string: "HTTP/1.1 200 OK\r\nConnection: content-length, x\r\nContent-Length: 2\r\nX: 1\r\n\r\n"), toHead: false)
        bytes.clear()
        bytes.writeClientHead(framed, version: .http1_1, chunked: false, close: false)
        #expect(String(buffer: bytes) == "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
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
