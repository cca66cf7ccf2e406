import NIOCore
import NIOSSL

/// The server's certificate must name the URL's host. NIOSSL also takes a
/// certificate whose IP address entry is the address connected to, whatever
/// name was asked for: reached by a name, tokend takes only the name (RFC
/// 6125 §6.4: DNS-ID, one leading wildcard label), so a publicly trusted
/// certificate for some address cannot stand in for a provider whose name
/// was pointed there.
enum ServerIdentity {
    /// The certificate's DNS names (subjectAltName dNSName entries).
    static func dnsNames(of certificate: NIOSSLCertificate) -> [String] {
        certificate._subjectAlternativeNames().compactMap { name in
            name.nameType == .dnsName ? String(decoding: Array(name.contents), as: UTF8.self) : nil
        }
    }

    /// Whether `pattern` (a dNSName entry) names `host`; compared without case, a trailing dot ignored.
    static func matches(_ host: String, _ pattern: String) -> Bool {
        var host = host.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        let pattern = pattern.lowercased()
        guard pattern.hasPrefix("*.") else { return host == pattern }
        // `*.example.org` names `a.example.org`, never `example.org` or `a.b.example.org`.
        let suffix = pattern.dropFirst()
        guard let dot = host.firstIndex(of: "."), dot != host.startIndex else { return false }
        return host[dot...] == suffix && suffix.dropFirst().contains(".")
    }
}
