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
        /// HTML character references: `&#47;`, `&#x2F;` (semicolon optional,
        /// as browsers read them) and `&amp;`-style names of ASCII characters,
        /// what a provider's HTML error page makes of an echoed request.
        case html
    }

    /// The text as it is, and decoded each way (percent-encoding twice too).
    static func all(of text: [UInt8]) -> [DecodedView] {
        var raw = DecodedView()
        raw.bytes = text
        raw.origin = text.indices.map { $0..<($0 + 1) }
        let once = raw.decoded(.percent)
        let html = raw.decoded(.html)
        return [
            raw, once, once.decoded(.percent), raw.decoded(.form), raw.decoded(.json), html, html.decoded(.form),
        ]
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
            if byte == UInt8(ascii: "&"), encoding == .html, let (value, length) = reference(at: index) {
                emit(value, length)
            } else if byte == UInt8(ascii: "%"), encoding == .percent || encoding == .form,
                let value = hex(at: index + 1, digits: 2)
            {
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

    /// Named references of the ASCII characters a token, a form or JSON holds.
    static let names: [String: UInt8] = [
        "amp": 0x26, "lt": 0x3C, "gt": 0x3E, "quot": 0x22, "apos": 0x27, "sol": 0x2F, "plus": 0x2B,
        "equals": 0x3D, "percnt": 0x25, "lowbar": 0x5F, "period": 0x2E, "hyphen": 0x2D, "dash": 0x2D,
        "colon": 0x3A, "num": 0x23, "excl": 0x21, "quest": 0x3F, "tilde": 0x7E, "bsol": 0x5C,
    ]

    /// The byte an HTML character reference at `start` (its `&`) stands for,
    /// and the reference's length; nil unless it names a byte below 0x80.
    func reference(at start: Int) -> (UInt8, Int)? {
        var index = start + 1
        func digits(_ accept: (UInt8) -> Bool) -> [UInt8] {
            var taken: [UInt8] = []
            while index < bytes.count, taken.count < 8, accept(bytes[index]) {
                taken.append(bytes[index])
                index += 1
            }
            return taken
        }
        var value: UInt32
        if index < bytes.count, bytes[index] == UInt8(ascii: "#") {
            index += 1
            let isHex = index < bytes.count && (bytes[index] | 0x20) == UInt8(ascii: "x")
            if isHex { index += 1 }
            let taken = isHex ? digits { ($0 >= 0x30 && $0 <= 0x39) || (($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x66) }
                : digits { $0 >= 0x30 && $0 <= 0x39 }
            guard !taken.isEmpty, let parsed = UInt32(String(decoding: taken, as: UTF8.self), radix: isHex ? 16 : 10)
            else { return nil }
            value = parsed
        } else {
            let name = digits { ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A }
            guard let byte = Self.names[String(decoding: name, as: UTF8.self).lowercased()],
                index < bytes.count, bytes[index] == UInt8(ascii: ";")
            else { return nil }
            value = UInt32(byte)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ";") { index += 1 }
        guard value < 0x80 else { return nil }
        return (UInt8(value), index - start)
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
