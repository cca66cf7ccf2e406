import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import ProxyProgram

/// The proxy's HTTP/1.1 reader: messages in any split, and every ambiguity
/// that lets two parsers disagree on where a request ends refused.
@Suite struct WireTests {
    /// What a decoder makes of a stream: "HEAD target", body bytes, "END", "ERROR status".
    func requests(_ text: String, pieces: [Int] = []) -> [String] {
        var decoder = RequestDecoder()
        var parts: [String] = []
        var bytes = ByteBuffer(string: text)
        var cuts = pieces.makeIterator()
        while bytes.readableBytes > 0 {
            let size = min(cuts.next() ?? bytes.readableBytes, bytes.readableBytes)
            decoder.append(bytes.readSlice(length: size)!)
            do {
                while let part = try decoder.next() {
                    switch part {
                    case .head(let head): parts.append("HEAD \(head.target)")
                    case .body(let data):
                        if case let last? = parts.last, last.hasPrefix("BODY ") {
                            parts[parts.count - 1] = last + String(buffer: data)
                        } else {
                            parts.append("BODY " + String(buffer: data))
                        }
                    case .end: parts.append("END")
                    }
                }
            } catch {
                return parts + ["ERROR \(error.status.code)"]
            }
        }
        return parts
    }

    static let pipelined =
        "\r\nPOST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        + "PUT /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;name=value\r\nabc\r\n0a\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"
        + "GET /c HTTP/1.0\r\n\r\n"
    static let expected = ["HEAD /a", "BODY hello", "END", "HEAD /b", "BODY abc0123456789", "END", "HEAD /c", "END"]

    @Test func pipelinedRequestsReadTheSameInAnySplit() {
        #expect(requests(Self.pipelined) == Self.expected)
        #expect(requests(Self.pipelined, pieces: Array(repeating: 1, count: Self.pipelined.utf8.count)) == Self.expected)
        var generator = SplitMix(seed: 7)
        for _ in 0..<500 {
            let pieces = (0..<40).map { _ in Int(generator.next() % 17) + 1 }
            #expect(requests(Self.pipelined, pieces: pieces) == Self.expected, "\(pieces)")
        }
    }

    /// The heads' vectors are HTTPHead's (RequestHeadTests): here, that their refusals reach the client
    /// with their status through the decoder, and the bodies' own.
    @Test func ambiguousFramingIsRefused() {
        let refused: [(String, Int)] = [
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            ("POST / HTTP/1.1\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n", 400),
            ("GET / HTTP/1.1\nHost: x\r\n\r\n", 400),
            ("GET / HTTP/2.0\r\n\r\n", 505),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400),
        ]
        for (text, status) in refused {
            #expect(requests(text).last == "ERROR \(status)", "\(text.debugDescription)")
        }
        #expect(requests("POST / HTTP/1.1\r\nContent-Length: 3, 3\r\nContent-Length:3\r\n\r\nabc") == ["HEAD /", "BODY abc", "END"])
    }

    /// A body longer than 4 GiB has the length it says, both ways: a count cut to 32 bits (2³² + 5 taken
    /// as 5) would end the body after 5 of these 8 bytes and read the rest as a new head.
    @Test func lengthsPastFourGiBAreTakenAsTheySay() throws {
        var requests = RequestDecoder()
        requests.append(ByteBuffer(string: "PUT / HTTP/1.1\r\nContent-Length: 4294967301\r\n\r\n01234567"))
        guard case .head(let head)? = try requests.next() else { return #expect(Bool(false)) }
        #expect(head.contentLength == 4_294_967_301)
        guard case .body(let data)? = try requests.next() else { return #expect(Bool(false)) }
        #expect(String(buffer: data) == "01234567")
        #expect(try requests.next() == nil, "the body goes on")

        var answers = ResponseDecoder()
        answers.append(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 4294967301\r\n\r\n01234567"))
        guard case .head? = try answers.next() else { return #expect(Bool(false)) }
        guard case .body(let body)? = try answers.next() else { return #expect(Bool(false)) }
        #expect(String(buffer: body) == "01234567")
        #expect(try answers.next() == nil, "the body goes on")
    }

    /// Bytes already read are not kept: a stream of chunk-size lines that each end in a later read costs
    /// what one line and one read take, however long it goes on.
    @Test func whatWasReadIsNotKept() throws {
        var decoder = RequestDecoder()
        decoder.append(ByteBuffer(string: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))
        guard case .head? = try decoder.next() else { return #expect(Bool(false)) }
        var stream = ByteBuffer(string: String(repeating: "1;" + String(repeating: "a", count: 4000) + "\r\nX\r\n", count: 200))
        var data = 0
        var largest = 0
        while stream.readableBytes > 0 {
            decoder.append(stream.readSlice(length: min(1000, stream.readableBytes))!)
            while let part = try decoder.next() {
                if case .body(let piece) = part { data += piece.readableBytes }
            }
            largest = max(largest, decoder.capacity)
        }
        #expect(data == 200)
        #expect(largest <= 32 * 1024, "\(largest) bytes kept")
    }

    @Test func aStartLineEndsInCRLF() {
        #expect(requests("GET / HTTP/1.1\rXY: z\r\n\r\n").last == "ERROR 400")
        #expect(answers("HTTP/1.1 200 OK\rXY: z\r\nContent-Length: 0\r\n\r\n").last == "ERROR 502")
    }

    @Test func aHeadLongerThanTheLimitIs431() {
        let long = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: Wire.maximumHead) + "\r\n\r\n"
        #expect(requests(long, pieces: Array(repeating: 4096, count: 100)).last == "ERROR 431")
        #expect(requests(long).last == "ERROR 431")
        // What a head costs to note is bounded by its lines, not only its bytes.
        let lines = (0..<Wire.maximumFields).map { "h\($0): v\r\n" }.joined()
        #expect(requests("GET / HTTP/1.1\r\n" + lines + "\r\n") == ["HEAD /", "END"])
        #expect(requests("GET / HTTP/1.1\r\n" + lines + "x: y\r\n\r\n").last == "ERROR 431")
        let unended = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: Wire.maximumHead)
        #expect(requests(unended, pieces: Array(repeating: 4096, count: 100)).last == "ERROR 431")
    }

    func answers(_ text: String, toHead: Bool = false, closed: Bool = false) -> [String] {
        var decoder = ResponseDecoder()
        decoder.toHead = toHead
        decoder.append(ByteBuffer(string: text))
        var parts: [String] = []
        do {
            while let part = try decoder.next() {
                switch part {
                case .head(let head): parts.append("\(head.status)\(head.keepAlive ? "" : " close")")
                case .body(let data): parts.append(String(buffer: data))
                case .end:
                    parts.append("END")
                    if decoder.hasBytes { parts.append("UNASKED") }
                    return parts
                }
            }
        } catch {
            return parts + ["ERROR \(error.status.code)"]
        }
        if closed, case .end? = decoder.closed() { parts.append("END") }
        return parts
    }

    @Test func anAnswersBodyEndsWhereItsFramingSays() {
        #expect(answers("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi") == ["200", "hi", "END"])
        #expect(answers("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", toHead: true) == ["200", "END"])
        #expect(answers("HTTP/1.1 204 No Content\r\n\r\n") == ["204", "END"])
        #expect(answers("HTTP/1.1 304\r\nContent-Length: 10\r\n\r\n") == ["304", "END"])
        #expect(answers("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx") == ["200", "x", "END"])
        #expect(answers("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n") == ["200", "hi", "END"])
        #expect(answers("HTTP/1.1 200 OK\r\n\r\nall of it", closed: true) == ["200 close", "all of it", "END"])
        #expect(answers("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n") == ["200 close", "END"])
        #expect(answers("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n") == ["200", "END"])
        #expect(answers("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") == ["200 close", "END"])
        #expect(answers("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy") == ["200", "x", "END", "UNASKED"])
    }

    @Test func aMalformedAnswerIs502() {
        for text in [
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 200 OK\nX: 1\r\n\r\n",
            "ICY 200 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "HTTP/1.1 099 Odd\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            #expect(answers(text).last == "ERROR 502", "\(text.debugDescription)")
        }
    }

    @Test func chunkSizesAreWrittenInHex() {
        for (size, text) in [(1, "1"), (15, "f"), (16, "10"), (255, "ff"), (4096, "1000"), (0x1234_5678, "12345678")] {
            var bytes = ByteBuffer()
            bytes.writeChunkSize(size)
            #expect(String(buffer: bytes) == text + "\r\n")
        }
    }
}
