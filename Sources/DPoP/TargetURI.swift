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
