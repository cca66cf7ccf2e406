import Foundation

/// The `htu` claim (RFC 9449 §4.2): the request's target URI without query
/// and fragment, in the form RFC 3986 §6.2.2 and §6.2.3 normalise to, since
/// servers compare it byte for byte: scheme and host in lower case, the
/// scheme's default port left out, an empty path written "/". The path is
/// kept as given, a trailing slash included: it names another resource.
public enum TargetURI {
    public static func htu(_ url: String) throws(ProofError) -> String {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "https" || scheme == "http"
        else {
            throw ProofError("\(url) is not an http or https URL")
        }
        guard var host = components.percentEncodedHost?.lowercased(), !host.isEmpty else {
            throw ProofError("\(url) names no host")
        }
        guard components.percentEncodedUser == nil, components.percentEncodedPassword == nil else {
            throw ProofError("a DPoP target URL carries no user name or password")
        }
        if host.contains(":"), !host.hasPrefix("[") { host = "[\(host)]" }
        let defaultPort = scheme == "https" ? 443 : 80
        let port = components.port.flatMap { $0 == defaultPort ? nil : $0 }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")\(path)"
    }

    /// A form of `url` in which every spelling a server may take for the same
    /// resource is one: the `htu` (scheme and host in lower case, no default
    /// port), the host's trailing dot dropped, `%`-encoded unreserved
    /// characters decoded, other escapes in upper case, `;` (or `%3B`) parameters and
    /// empty segments left out, dot segments resolved (RFC 3986 §5.2.4), no
    /// trailing slash, the path in lower case. Two URLs with the same form may
    /// name one resource; ones that differ cannot be told to be the same. Used
    /// to refuse proofs for a provider's own endpoints, where a wider match
    /// only refuses more.
    public static func comparable(_ url: String) throws(ProofError) -> String {
        let htu = try htu(url)
        let origin = Self.origin(ofHTU: htu)
        var host = origin.replacingOccurrences(of: ".:", with: ":")
        if host.hasSuffix(".") { host.removeLast() }
        var segments: [String] = []
        for raw in htu.dropFirst(origin.count).split(separator: "/", omittingEmptySubsequences: true) {
            // An escaped ";" (%3B) too: servers that decode before they strip parameters take it as one.
            let unescaped = raw.replacingOccurrences(of: "%3B", with: ";").replacingOccurrences(of: "%3b", with: ";")
            let segment = decodingUnreserved(unescaped.prefix { $0 != ";" })
            switch segment {
            case "", ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment.lowercased())
            }
        }
        return host + "/" + segments.joined(separator: "/")
    }

    /// `text` with its `%`-escapes of unreserved characters (RFC 3986 §2.3)
    /// decoded and its other escapes' hex digits in upper case.
    static func decodingUnreserved(_ text: Substring) -> String {
        var bytes = Array(text.utf8)[...]
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        while let byte = bytes.popFirst() {
            guard byte == 0x25, bytes.prefix(2).count == 2, bytes.prefix(2).allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
                let value = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16)
            else {
                out.append(byte)
                continue
            }
            bytes = bytes.dropFirst(2)
            let character = Character(Unicode.Scalar(value))
            if character.isASCII, character.isLetter || character.isNumber || "-._~".contains(character) {
                out.append(value)
            } else {
                out.append(contentsOf: Array(String(format: "%%%02X", value).utf8))
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The origin (scheme://host[:port]) of an `htu`: what a DPoP nonce is kept for.
    public static func origin(ofHTU htu: String) -> String {
        guard let schemeEnd = htu.range(of: "://") else { return htu }
        let rest = htu[schemeEnd.upperBound...]
        let hostEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        return String(htu[..<hostEnd])
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
