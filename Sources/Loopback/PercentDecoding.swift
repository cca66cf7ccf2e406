extension StringProtocol {
    /// The text with each `%XX` replaced by the byte it names; nil when a `%`
    /// is not followed by two hex digits or the bytes are not UTF-8. That is
    /// where Foundation's `removingPercentEncoding` answers nil, and it lets
    /// a program that needs nothing else from Foundation do without it.
    public var percentDecoded: String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var rest = utf8.makeIterator()
        while let byte = rest.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = rest.next().flatMap(hexDigitValue), let low = rest.next().flatMap(hexDigitValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

private func hexDigitValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    default: nil
    }
}
