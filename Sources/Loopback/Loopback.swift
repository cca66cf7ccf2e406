#if canImport(Glibc)
import Glibc
#endif

/// Loopback, as tokend means it wherever plain http or a secure context is
/// allowed: an IP literal in 127.0.0.0/8, or ::1. A name (`localhost`,
/// `127.example.com`) is not: it resolves to whatever DNS or /etc/hosts says,
/// and another local user can listen on a loopback address tokend did not
/// pick.
public enum Loopback {
    /// `host` as a URL carries it: IPv6 literals may keep their brackets.
    public static func isLiteral(_ host: String) -> Bool {
        var name = host
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, name, &v6) == 1 else { return false }
        return withUnsafeBytes(of: &v6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
    }

    /// https anywhere, or http to a loopback literal.
    public static func isSafeScheme(_ scheme: String?, host: String?) -> Bool {
        guard let scheme = scheme?.lowercased(), let host, !host.isEmpty else { return false }
        return scheme == "https" || (scheme == "http" && isLiteral(host))
    }
}
