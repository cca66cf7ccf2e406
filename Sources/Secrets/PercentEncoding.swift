/// RFC 3986 percent-encoding of every byte but the unreserved characters
/// (ALPHA, DIGIT, "-", ".", "_", "~"): how form bodies and Basic credentials
/// carry a value (RFC 6749 §2.3.1, Appendix B), with `+` for a space when
/// asked. The Redactor looks for secrets in this form too, so it is the one
/// encoder both use.
public func percentEncoded(_ bytes: some Sequence<UInt8>, lowercaseHex: Bool = false, plusForSpace: Bool = false)
    -> [UInt8]
{
    let digits = Array((lowercaseHex ? "0123456789abcdef" : "0123456789ABCDEF").utf8)
    var out: [UInt8] = []
    for byte in bytes {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            out.append(byte)
        case UInt8(ascii: " ") where plusForSpace:
            out.append(UInt8(ascii: "+"))
        default:
            out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
        }
    }
    return out
}

extension StringProtocol {
    /// The text's UTF-8 with every byte but RFC 3986's unreserved characters as `%XX`.
    public var percentEncoded: String { String(decoding: Secrets.percentEncoded(utf8), as: UTF8.self) }
}
