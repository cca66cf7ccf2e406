/// A text's bytes after one way of undoing an encoding, each byte with the
/// range of the original bytes it came from: a secret found in the view is
/// cut from the original text.
struct DecodedView {
    var bytes: [UInt8] = []
    var origin: [Range<Int>] = []

    /// The ways an echoed secret is decoded, one at a time: a secret that
    /// holds what looks like another encoding's escape stays whole in each.
    enum Encoding {
        /// `%hh`, either case.
        case percent
        /// `%hh` and `+` for a space.
        case form
        /// `\/`, `\"`, `\\` and `\u00hh`.
        case json
    }

    /// The text as it is, and decoded each way (percent-encoding twice too).
    static func all(of text: [UInt8]) -> [DecodedView] {
        var raw = DecodedView()
        raw.bytes = text
        raw.origin = text.indices.map { $0..<($0 + 1) }
        let once = raw.decoded(.percent)
        return [raw, once, once.decoded(.percent), raw.decoded(.form), raw.decoded(.json)]
    }

    /// The escapes of `encoding` become the byte they stand for; everything else stays.
    func decoded(_ encoding: Encoding) -> DecodedView {
        var out = DecodedView()
        out.bytes.reserveCapacity(bytes.count)
        out.origin.reserveCapacity(bytes.count)
        var index = 0
        func emit(_ byte: UInt8, _ length: Int) {
            out.bytes.append(byte)
            out.origin.append(origin[index].lowerBound..<origin[index + length - 1].upperBound)
            index += length
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), encoding != .json, let value = hex(at: index + 1, digits: 2) {
                emit(value, 3)
            } else if byte == UInt8(ascii: "\\"), encoding == .json, index + 1 < bytes.count {
                let next = bytes[index + 1]
                if [UInt8(ascii: "/"), UInt8(ascii: "\""), UInt8(ascii: "\\")].contains(next) {
                    emit(next, 2)
                } else if next == UInt8(ascii: "u"), hex(at: index + 2, digits: 2) == 0, let value = hex(at: index + 4, digits: 2) {
                    emit(value, 6)
                } else {
                    emit(byte, 1)
                }
            } else if byte == UInt8(ascii: "+"), encoding == .form {
                emit(UInt8(ascii: " "), 1)
            } else {
                emit(byte, 1)
            }
        }
        return out
    }

    func hex(at start: Int, digits: Int) -> UInt8? {
        guard start + digits <= bytes.count else { return nil }
        var value: UInt8 = 0
        for byte in bytes[start..<(start + digits)] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | digit
        }
        return value
    }
}
