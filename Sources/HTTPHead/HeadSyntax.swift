/// RFC 9110's character classes, on bytes.
public enum HeadSyntax {
    /// RFC 9110 §5.6.2 tchar.
    @inlinable @inline(__always)
    public static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    /// RFC 9110 §5.5 field-vchar, SP and HTAB (obs-text included).
    @inlinable @inline(__always)
    public static func isValueByte(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte != 0x7F || byte == 0x09
    }

    @inlinable @inline(__always)
    public static func lower(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    @inlinable @inline(__always)
    static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    /// The bytes at `range` are `lowercase` but for the case of their letters.
    public static func equalsLowercase(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard lowercase.utf8CodeUnitCount == range.count else { return false }
        let expected = lowercase.utf8Start
        for offset in 0..<range.count where lower(p[range.lowerBound + offset]) != expected[offset] {
            return false
        }
        return true
    }

    public static func equalsLowercase(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: [UInt8]) -> Bool {
        guard lowercase.count == range.count else { return false }
        for offset in 0..<range.count where lower(p[range.lowerBound + offset]) != lowercase[offset] {
            return false
        }
        return true
    }

    /// The bytes at `range`, as text (a byte that is not UTF-8 becomes U+FFFD).
    public static func string(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) -> String {
        String(decoding: UnsafeRawBufferPointer(rebasing: p[range]), as: UTF8.self)
    }
}
