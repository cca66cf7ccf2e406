import HTTPHead
import Testing

/// The one request-head reader: every ambiguity that lets two parsers
/// disagree on where a request ends is refused, with the status its sender gets.
@Suite struct RequestHeadTests {
    static let limits = HeadLimits(bytes: 64 * 1024, fields: 256, line: 64 * 1024)

    /// What the reader makes of `text`: its head (found by the scanner, then read), or "ERROR status".
    func read(_ text: String, limits: HeadLimits = limits) -> Result<HTTPRequestHead, HeadError> {
        var scanner = HeadScanner(limits: limits)
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { p in
            Result { () throws(HeadError) in
                guard let length = try scanner.headLength(p) else { throw HeadError(status: 0, message: "unended") }
                return try HTTPRequestHead(Array(p[..<length]), limits: limits)
            }
        }
    }

    func status(_ text: String, limits: HeadLimits = limits) -> Int {
        switch read(text, limits: limits) {
        case .success: 200
        case .failure(let error): error.status
        }
    }

    @Test func ambiguousFramingAndMalformedLinesAreRefused() {
        let refused: [(String, Int)] = [
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
            ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n", 400),
            ("GET / HTTP/1.1\nHost: x\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: x\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\u{0}b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\n: x\r\n\r\n", 400),
            ("GET  / HTTP/1.1\r\n\r\n", 400),
            ("GET / x HTTP/1.1\r\n\r\n", 400),
            ("GET /\u{E9} HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1 \r\n\r\n", 400),
            ("GET / HTTP/1.1\rXY: z\r\n\r\n", 400),
            ("GET / HTTP/2.0\r\n\r\n", 505),
            ("GET / HTTP/0.9\r\n\r\n", 505),
            ("GET / HTTX/1.1\r\n\r\n", 400),
            ("NOT HTTP\r\n\r\n", 400),
            ("garbage\r\n\r\n", 400),
        ]
        for (text, expected) in refused {
            #expect(status(text) == expected, "\(text.debugDescription)")
        }
    }

    @Test func aWellFormedHeadIsReadAsItSays() throws {
        let head = try read("POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\nContent-Length:3\r\nexpect: 100-Continue\r\n\r\n").get()
        #expect(head.method == "POST" && head.syntax.method == .post && !head.syntax.method.isIdempotent)
        #expect(head.target == "/a?b=c" && head.path == "/a")
        #expect(head.syntax.contentLength == 3 && !head.syntax.chunked && head.syntax.keepAlive && head.syntax.expectsContinue)
        #expect(head.values("HOST") == ["x"] && head.values("accept") == [])
        let old = try read("GET / HTTP/1.0\r\nConnection: keep-alive, X-Private\r\n\r\n").get()
        #expect(old.syntax.keepAlive && old.syntax.fields.connectionNames == ["x-private"] && old.syntax.method.isIdempotent)
        #expect(try !read("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").get().syntax.keepAlive)
        #expect(try read("PUT / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n").get().syntax.chunked)
    }

    /// Each listener's limits: the proxy's 64 KiB and 256 lines, the metrics listener's 8 KiB and 64.
    @Test func theHeaderCountIsTheListenersOwn() {
        let lines = { (count: Int) in "GET / HTTP/1.1\r\n" + (0..<count).map { "h\($0): v\r\n" }.joined() + "\r\n" }
        #expect(status(lines(256)) == 200)
        #expect(status(lines(257)) == 431)
        let metrics = HeadLimits(bytes: 8 * 1024, fields: 64, line: 8 * 1024)
        #expect(status(lines(64), limits: metrics) == 200)
        #expect(status(lines(65), limits: metrics) == 431)
        #expect(status("GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 9000) + "\r\n\r\n", limits: metrics) == 431)
        #expect(status("GET /" + String(repeating: "a", count: 9000) + " HTTP/1.1\r\n\r\n", limits: HeadLimits(bytes: 32 * 1024, fields: 4, line: 8 * 1024)) == 414)
    }

    /// A head handed over without its empty line is refused rather than read past its end.
    @Test func aHeadNotWholeIsRefused() {
        for text in ["GET / HTTP/1.1\r\n", "GET / HTTP/1.1", ""] {
            #expect(throws: HeadError.self) { try HTTPRequestHead(Array(text.utf8), limits: Self.limits) }
        }
    }
}

/// An answer's head, read with the same tokenizer and as strictly.
@Suite struct ResponseHeadTests {
    func read(_ text: String, toHead: Bool = false) throws(HeadError) -> ResponseHeadSyntax {
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBytes { p in
            Result { () throws(HeadError) in try ResponseHeadSyntax(p, toHead: toHead, limits: RequestHeadTests.limits) }
        }.get()
    }

    @Test func theFramingIsWhatTheStatusAndFieldsSay() throws {
        #expect(try read("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n").framing.length == 2)
        #expect(try read("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", toHead: true).framing.length == 0)
        #expect(try read("HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n").framing.length == 0)
        #expect(try read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").framing.isChunked)
        let untilClose = try read("HTTP/1.1 200 OK\r\n\r\n")
        #expect(untilClose.framing.isUntilClose && !untilClose.keepAlive)
        #expect(try !read("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keepAlive)
        #expect(try read("HTTP/1.0 200\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").keepAlive)
    }

    @Test func aMalformedAnswerIsRefused() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n", "ICY 200 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 099 Odd\r\n\r\n", "HTTP/1.1 200 OK\rXY: z\r\n\r\n", "HTTP/1.1 200 O\u{1}K\r\n\r\n", "HTTP/1.1 200 OK\r\n X: 1\r\n\r\n",
        ] {
            #expect(throws: HeadError.self, "\(text.debugDescription)") { try read(text) }
        }
    }
}

extension BodyFraming {
    var length: Int? { if case .length(let length) = self { length } else { nil } }
    var isChunked: Bool { if case .chunked = self { true } else { false } }
    var isUntilClose: Bool { if case .untilClose = self { true } else { false } }
}
