/// A parsed Set-Cookie header (RFC 6265 §5.2, with RFC 6265bis where it
/// differs): the name-value pair and the attributes that survived parsing.
/// Attribute values are raw; storage (§5.3) interprets them.
public struct SetCookie: Sendable, Equatable {
    public var name: String
    public var value: String
    /// Absolute expiry from Expires, Unix seconds.
    public var expires: Int?
    /// Max-Age in seconds (may be zero or negative: delete).
    public var maxAge: Int?
    /// Lowercased, leading dot removed; nil when absent or empty.
    public var domain: String?
    /// nil when absent or not starting with "/" (storage uses the default path).
    public var path: String?
    public var secure = false
    public var httpOnly = false
    public var sameSite: SameSite?

    /// Longest attribute value considered (6265bis §5.6); longer ones are ignored.
    public static let maximumAttributeValueBytes = 1024

    /// Parses one header value; nil when the whole header must be ignored.
    public static func parse(_ header: String) -> SetCookie? {
        let bytes = Array(header.utf8)
        // 6265bis: a control character (other than HTAB) voids the header.
        if bytes.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) { return nil }
        let parts = bytes.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
        let pair = parts[0]
        // RFC 6265: a pair without "=" or with an empty name is ignored
        // (6265bis would keep it as a nameless cookie; browsers disagree).
        guard let equals = pair.firstIndex(of: UInt8(ascii: "=")) else { return nil }
        let name = trim(pair[..<equals])
        let value = trim(pair[(equals + 1)...])
        if name.isEmpty { return nil }
        var cookie = SetCookie(name: string(name), value: string(value))
        for attribute in parts.dropFirst() {
            cookie.apply(attribute)
        }
        return cookie
    }

    mutating func apply(_ attribute: ArraySlice<UInt8>) {
        let key: ArraySlice<UInt8>
        let value: ArraySlice<UInt8>
        if let equals = attribute.firstIndex(of: UInt8(ascii: "=")) {
            key = Self.trim(attribute[..<equals])
            value = Self.trim(attribute[(equals + 1)...])
        } else {
            key = Self.trim(attribute)
            value = []
        }
        if value.count > Self.maximumAttributeValueBytes { return }
        switch Self.string(key).lowercased() {
        case "expires":
            if let date = CookieDate.parse(Self.string(value)) { expires = date }
        case "max-age":
            if let seconds = Self.maxAgeSeconds(value) { maxAge = seconds }
        case "domain":
            var domain = value
            if domain.first == UInt8(ascii: ".") { domain = domain.dropFirst() }
            // An empty value is ignored: an earlier Domain attribute stands.
            if !domain.isEmpty { self.domain = Self.string(domain).lowercased() }
        case "path":
            path = value.first == UInt8(ascii: "/") ? Self.string(value) : nil
        case "secure":
            secure = true
        case "httponly":
            httpOnly = true
        case "samesite":
            sameSite = SameSite.allCases.first { $0.rawValue.lowercased() == Self.string(value).lowercased() }
        default:
            break
        }
    }

    init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// §5.2.2: an optional "-" then digits; anything else is ignored. An
    /// outside number: a value beyond Int saturates (Int.max or -Int.max),
    /// every step checked, so no header can trap.
    static func maxAgeSeconds(_ value: ArraySlice<UInt8>) -> Int? {
        var digits = value
        let negative = digits.first == UInt8(ascii: "-")
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        var result = 0
        for digit in digits {
            let (shifted, multiplyOverflow) = result.multipliedReportingOverflow(by: 10)
            let (sum, addOverflow) = shifted.addingReportingOverflow(Int(digit - 0x30))
            if multiplyOverflow || addOverflow { return negative ? -Int.max : Int.max }
            result = sum
        }
        return negative ? -result : result
    }

    /// Removes leading and trailing SP and HTAB.
    static func trim(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) })
        else { return [] }
        return bytes[first...last]
    }

    static func string(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes, as: UTF8.self)
    }
}
