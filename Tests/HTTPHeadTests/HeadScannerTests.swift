import HTTPHead
import Testing

/// Where a head ends, in bytes that come in pieces, within each listener's limits.
@Suite struct HeadScannerTests {
    static let small = HeadLimits(bytes: 64, fields: 4, line: 32)

    /// The head's length after each piece, or the status it was refused with.
    func scan(_ text: String, pieces: Int, limits: HeadLimits = small) -> String {
        var scanner = HeadScanner(limits: limits)
        let bytes = Array(text.utf8)
        var end = 0
        while end < bytes.count {
            end = min(end + pieces, bytes.count)
            do {
                if let length = try bytes[..<end].withUnsafeBytes({ p in try scanner.headLength(p) }) { return "\(length)" }
            } catch {
                return "ERROR \((error as? HeadError)?.status ?? 0)"
            }
        }
        return "unended"
    }

    @Test func aHeadEndsAtItsEmptyLineInAnySplit() {
        let text = "GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"
        for pieces in 1...text.utf8.count {
            #expect(scan(text, pieces: pieces) == "27", "\(pieces)")
        }
        #expect(scan("GET / HTTP/1.1\r\nHost: x\r\n", pieces: 3) == "unended")
    }

    @Test func aLineFeedWithoutCarriageReturnIsRefused() {
        for text in ["GET / HTTP/1.1\nHost: x\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\n\r\n", "GET / HTTP/1.1\r\n\n"] {
            #expect(scan(text, pieces: 1) == "ERROR 400", "\(text.debugDescription)")
            #expect(scan(text, pieces: 100) == "ERROR 400", "\(text.debugDescription)")
        }
    }

    @Test func eachLimitIsTheListenersOwn() {
        // A line past the line limit: 414 on the request line, 431 after it; whole or still coming.
        let longTarget = "GET /" + String(repeating: "a", count: 40) + " HTTP/1.1\r\n\r\n"
        #expect(scan(longTarget, pieces: 100) == "ERROR 414")
        #expect(scan(longTarget, pieces: 5) == "ERROR 414")
        let longField = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 40) + "\r\n\r\n"
        #expect(scan(longField, pieces: 100) == "ERROR 431")
        #expect(scan(longField, pieces: 7) == "ERROR 431")
        // Lines each within theirs, the head past its own.
        let longHead = "GET / HTTP/1.1\r\n" + String(repeating: "X: 0123456789\r\n", count: 4) + "\r\n"
        #expect(scan(longHead, pieces: 100) == "ERROR 431")
        #expect(scan(longHead, pieces: 1) == "ERROR 431")
        // The same heads within larger limits.
        let large = HeadLimits(bytes: 1024, fields: 10, line: 100)
        #expect(scan(longTarget, pieces: 5, limits: large) == "\(longTarget.utf8.count)")
        #expect(scan(longHead, pieces: 1, limits: large) == "\(longHead.utf8.count)")
    }
}
