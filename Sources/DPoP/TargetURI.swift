/// The `htu` claim (RFC 9449 §4.2): the request's target URI without query
/// and fragment, in the form RFC 3986 §6.2.2 and §6.2.3 normalise to, since
/// servers compare it byte for byte: scheme and host in lower case, the
/// scheme's default port left out, an empty path written "/". The path is
/// kept as given, a trailing slash included: it names another resource.
/// TargetURL is the parser behind it.
public enum TargetURI {
    public static func htu(_ url: String) throws(ProofError) -> String {
        try TargetURL(url).htu
    }

    /// The origin (scheme://host[:port]) of an `htu`: what a DPoP nonce is kept for.
    public static func origin(ofHTU htu: String) -> String {
        guard let schemeEnd = htu.firstRange(of: "://") else { return htu }
        let rest = htu[schemeEnd.upperBound...]
        let hostEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        return String(htu[..<hostEnd])
    }
}
