import HTTPHead
import TestSupport
import Testing

/// Heads made of the pieces that matter to a reader, 30,000 of them: none is
/// read past its end, and whatever is accepted has every line ended by CRLF
/// and no CR or LF elsewhere, and the scanner ends it where it ends; a head handed over whole is held to what the
/// scanner checks as bytes come.
@Suite struct RandomHeadTests {
    static let starts = ["GET / HTTP/1.1", "POST /a?b HTTP/1.0", "HTTP/1.1 200 OK", "HTTP/1.0 204", "GET  / HTTP/1.1", "GET / HTTP/2", "GET /\u{E9} HTTP/1.1", "HTTP/1.1 2000 OK"]
    static let names = ["Host", "Content-Length", "Transfer-Encoding", "Connection", "X", "", " X", "X ", "X\u{0}"]
    static let separators = [": ", ":", ":\t", " : ", ""]
    static let values = ["a", "5", "5, 5", "5, 6", "chunked", "gzip", "close", "", "a\rb", "a\u{0}b", "a\u{7F}", "\u{E9}", "x\ny"]
    static let endings = ["\r\n", "\r\n", "\r\n", "\r\n", "\n", "\r", " \r\n"]

    @Test func noHeadIsReadPastItsEndAndWhatIsAcceptedEndsEachLineInCRLF() {
        var generator = SplitMix(seed: 43)
        func any(_ choices: [String]) -> String { choices[Int(generator.next() % UInt64(choices.count))] }
        let limits = HeadLimits(bytes: 200, fields: 8, line: 40)
        var accepted = 0
        for _ in 0..<30_000 {
            var text = any(Self.starts) + any(Self.endings)
            for _ in 0..<Int(generator.next() % 5) {
                text += any(Self.names) + any(Self.separators) + any(Self.values) + any(Self.endings)
            }
            text += "\r\n"
            let bytes = Array(text.utf8)
            let request = try? HTTPRequestHead(bytes, limits: limits)
            let response = bytes.withUnsafeBytes { try? ResponseHeadSyntax($0, toHead: false, limits: limits) }
            guard request != nil || response != nil else { continue }
            accepted += 1
            for (index, byte) in bytes.enumerated() {
                if byte == 0x0A { #expect(index > 0 && bytes[index - 1] == 0x0D, "\(text.debugDescription)") }
                if byte == 0x0D { #expect(index + 1 < bytes.count && bytes[index + 1] == 0x0A, "\(text.debugDescription)") }
            }
            var scanner = HeadScanner(limits: limits)
            #expect(bytes.withUnsafeBytes { try? scanner.headLength($0) } == bytes.count, "\(text.debugDescription)")
        }
        #expect(accepted > 100)
    }

    @Test func aHeadHandedOverWholeIsHeldToTheScannersChecks() {
        let limits = HeadLimits(bytes: 64, fields: 8, line: 24)
        for text in ["GET / HTTP/1.1\r\nX: a\nB: c\r\n\r\n", "GET / HTTP/1.1\r\n\nX: y\r\n\r\n"] {
            #expect((try? HTTPRequestHead(Array(text.utf8), limits: limits)) == nil, "\(text.debugDescription)")
        }
        let status = { (text: String) in
            #expect(throws: HeadError.self) { try HTTPRequestHead(Array(text.utf8), limits: limits) }?.status
        }
        #expect(status("GET /" + String(repeating: "a", count: 30) + " HTTP/1.1\r\n\r\n") == 414)
        #expect(status("GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 30) + "\r\n\r\n") == 431)
        #expect(status("GET / HTTP/1.1\r\n" + String(repeating: "X: 0123456789\r\n", count: 4) + "\r\n") == 431)
    }
}
