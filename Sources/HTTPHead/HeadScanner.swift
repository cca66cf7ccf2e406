#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Finds where a head ends in bytes that come in pieces, within a listener's
/// limits. Each line must end in CRLF: a LF alone is where two parsers can
/// disagree on where a line ends, and is refused. What has been searched is
/// remembered, so a head that comes a byte at a time is read once.
public struct HeadScanner: Sendable {
    public let limits: HeadLimits
    /// Where the line not yet seen whole begins.
    private var scanned = 0

    public init(limits: HeadLimits) {
        self.limits = limits
    }

    /// The head's length at the start of `p` (all the bytes read so far), through its empty line, or nil
    /// while it is not whole. 431 past the head's or a header line's limit; 414 past it on the start line.
    public mutating func headLength(_ p: UnsafeRawBufferPointer) throws(HeadError) -> Int? {
        var start = scanned
        while start < p.count {
            guard let found = memchr(p.baseAddress! + start, 0x0A, p.count - start) else {
                if p.count > limits.bytes { throw tooLong }
                try check(lineFrom: start, to: p.count)
                return nil
            }
            let lf = UnsafeRawPointer(found) - p.baseAddress!
            guard lf > start, p[lf - 1] == 0x0D else { throw .bad("a line ends in LF without CR") }
            if lf + 1 > limits.bytes { throw tooLong }
            try check(lineFrom: start, to: lf + 1)
            if lf - 1 == start {
                scanned = 0
                return lf + 1
            }
            start = lf + 1
            scanned = start
        }
        if p.count > limits.bytes { throw tooLong }
        return nil
    }

    /// Forgets the head searched so far: the next bytes begin another.
    public mutating func reset() { scanned = 0 }

    private func check(lineFrom start: Int, to end: Int) throws(HeadError) {
        guard end - start > limits.line else { return }
        if start == 0 { throw HeadError(status: 414, message: "the request line is longer than \(limits.line) bytes") }
        throw HeadError(status: 431, message: "a header line is longer than \(limits.line) bytes")
    }

    private var tooLong: HeadError { HeadError(status: 431, message: "the head is longer than \(limits.bytes) bytes") }
}
