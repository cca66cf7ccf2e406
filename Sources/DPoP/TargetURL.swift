/// An http or https URL as DPoP names it: parsed once by RFC 3986's grammar
/// (§3) and kept in the forms everything else compares. The one URL
/// canonicalizer of tokend's proofs: the `htu` a proof carries, the targets
/// GetProof signs for (ProofTargets), the provider's endpoints it never signs
/// for, and the origin a server's nonce and clock are kept by.
///
/// Parsing takes only what the grammar allows of an http(s) URL without user
/// information: no space, control, backslash or non-ASCII byte outside the
/// host, every `%` followed by two hex digits, a port of 1–65535. What the host
/// is written as is judged apart (`hostProblem`), so the token endpoint a
/// provider configured oddly still gets its `htu`.
public struct TargetURL: Sendable, Hashable {
    /// "http" or "https".
    public let scheme: String
    /// As written, ASCII letters in lower case; an IPv6 literal keeps its brackets.
    public let host: String
    /// nil: the scheme's default (443, 80), written or not (RFC 3986 §6.2.3).
    public let port: Int?
    /// As written, "/" for an empty one (RFC 3986 §6.2.3).
    public let path: String

    public init(_ url: String) throws(ProofError) {
        let bytes = Array(url.utf8)
        guard bytes.count <= Self.maximumLength else { throw ProofError("a DPoP target URL is longer than \(Self.maximumLength) bytes") }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
            case let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased(), scheme == "https" || scheme == "http"
        else {
            throw ProofError("\(url) is not an http or https URL")
        }
        let rest = bytes[(colon + 1)...]
        guard rest.starts(with: Array("//".utf8)) else { throw ProofError("\(url) names no host") }
        let authorityStart = rest.startIndex + 2
        let authorityEnd = bytes[authorityStart...].firstIndex { "/?#".utf8.contains($0) } ?? bytes.endIndex
        let pathEnd = bytes[authorityEnd...].firstIndex { "?#".utf8.contains($0) } ?? bytes.endIndex
        let authority = bytes[authorityStart..<authorityEnd]
        let path = bytes[authorityEnd..<pathEnd]
        // Outside the host: only what RFC 3986 lets a URI hold (a backslash is a slash to browsers' parsers).
        if let bad = (bytes[..<authorityStart] + bytes[authorityEnd...]).first(where: { !Self.isURIByte($0) }) {
            throw ProofError("\(url) is not a URI: the byte 0x\(String(bad, radix: 16)) must be percent-encoded")
        }
        guard !authority.contains(UInt8(ascii: "@")) else { throw ProofError("a DPoP target URL carries no user name or password") }
        let (host, port) = try Self.split(authority, of: url)
        guard !host.isEmpty else { throw ProofError("\(url) names no host") }
        guard Self.escapesAreWellFormed(path) else { throw ProofError("\(url) has a % not followed by two hex digits") }
        self.scheme = scheme
        self.host = Self.lowercasedASCII(host)
        self.port = port == (scheme == "https" ? 443 : 80) ? nil : port
        self.path = path.isEmpty ? "/" : String(decoding: path, as: UTF8.self)
    }

    static let maximumLength = 8192

    /// The `htu` claim (RFC 9449 §4.2): scheme, host and port normalized (lower case, no default port), the
    /// path as given (servers compare it with the one the request carried), no query or fragment.
    public var htu: String { origin + path }

    /// scheme://host[:port]: what a server's nonce and clock are kept for.
    public var origin: String { "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")" }

    /// The path in RFC 3986's normal form (§6.2.2): escapes' hex digits in upper case, escaped unreserved
    /// characters decoded, dot segments removed.
    public var normalizedPath: String { Self.removingDotSegments(Self.normalizingEscapes(path)) }

    /// The URL in RFC 3986's normal form (§6.2.2, §6.2.3), without query and fragment: equal for two URLs
    /// that are one by the standard's syntax alone.
    public var normalized: String { origin + normalizedPath }

    /// Whether this URL is `base` or under it: the same scheme, host and port, and a normalized path that
    /// is base's or continues it at a segment boundary (`/mail` covers `/mail` and `/mail/inbox`, not
    /// `/mailbox`; `/mail/` covers `/mail/x`, not `/mail`).
    public func isWithin(_ base: TargetURL) -> Bool {
        guard scheme == base.scheme, host == base.host, port == base.port else { return false }
        let inner = normalizedPath
        let outer = base.normalizedPath
        guard inner.hasPrefix(outer) else { return false }
        if outer.hasSuffix("/") || inner.utf8.count == outer.utf8.count { return true }
        return inner.utf8.dropFirst(outer.utf8.count).first == UInt8(ascii: "/")
    }

    /// Splits "host[:port]" (the host may be "[v6]"); the port as a number, nil when absent or empty.
    private static func split(_ authority: ArraySlice<UInt8>, of url: String) throws(ProofError) -> (ArraySlice<UInt8>, Int?) {
        var host = authority
        var portText: ArraySlice<UInt8> = []
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { throw ProofError("\(url) has an unclosed [ in its host") }
            host = authority[...close]
            let after = authority[(close + 1)...]
            guard after.isEmpty || after.first == UInt8(ascii: ":") else { throw ProofError("\(url) has text after its IPv6 literal") }
            portText = after.dropFirst()
        } else if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
            host = authority[..<colon]
            portText = authority[(colon + 1)...]
        }
        guard !portText.isEmpty else { return (host, nil) }
        guard portText.count <= 5, portText.allSatisfy({ (0x30...0x39).contains($0) }),
            let port = Int(String(decoding: portText, as: UTF8.self)), (1...65535).contains(port)
        else {
            throw ProofError("\(url) has a port that is not a number from 1 to 65535")
        }
        return (host, port)
    }

    /// unreserved, reserved and "%" (RFC 3986 §2).
    static func isURIByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        default: "-._~:/?#[]@!$&'()*+,;=%".utf8.contains(byte)
        }
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
    }

    private static func escapesAreWellFormed(_ bytes: ArraySlice<UInt8>) -> Bool {
        var index = bytes.startIndex
        while let percent = bytes[index...].firstIndex(of: UInt8(ascii: "%")) {
            guard percent + 2 < bytes.endIndex, isHexDigit(bytes[percent + 1]), isHexDigit(bytes[percent + 2]) else { return false }
            index = percent + 3
        }
        return true
    }

    static func lowercasedASCII(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }, as: UTF8.self)
    }
}

/// A proof that cannot be made for what was asked (a bad method or URL).
public struct ProofError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    /// Set when the key could not sign (see ProofKeyError.Kind).
    public var keyError: ProofKeyError?
    public init(_ description: String) {
        self.description = description
        self.keyError = nil
    }
}
