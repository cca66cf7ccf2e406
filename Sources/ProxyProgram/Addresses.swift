#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

#if canImport(Glibc)
import Glibc
#endif

/// The upstream: scheme, host and port, and a path prefix requests go under.
struct Upstream: Sendable {
    let base: String
    let prefix: String
    let tls: Bool
    /// The name or address to connect to (an IPv6 literal without brackets).
    let host: String
    let port: Int
    /// The Host header requests carry upstream (RFC 9110 §7.2: the port only when it is not the scheme's).
    let authority: String

    /// https anywhere, http only to a loopback literal (Loopback).
    init?(_ text: String) {
        guard let url = URLComponents(string: text), url.query == nil, url.fragment == nil,
            Loopback.isSafeScheme(url.scheme, host: url.host), let scheme = url.scheme?.lowercased(),
            let name = url.host, !name.isEmpty
        else { return nil }
        var origin = url
        origin.path = ""
        guard let base = origin.string else { return nil }
        self.base = base
        prefix = url.path.hasSuffix("/") ? String(url.path.dropLast()) : url.path
        tls = scheme == "https"
        let standard = tls ? 443 : 80
        port = url.port ?? standard
        host = unbracketed(name)
        let literal = host.contains(":") ? "[\(host)]" : host
        authority = port == standard ? literal : "\(literal):\(port)"
    }
}

enum ListenAddress: Sendable {
    case unix(path: String, mode: mode_t)
    case tcp(host: String, port: Int)
    /// A listening socket systemd passed (LISTEN_FDS), fd 3.
    case inherited(CInt)

    init?(_ text: String, mode: String) {
        if text.hasPrefix("unix:") {
            guard let bits = mode_t(mode, radix: 8), bits <= 0o777 else { return nil }
            self = .unix(path: String(text.dropFirst(5)), mode: bits)
        } else if text.hasPrefix("tcp:") {
            let rest = text.dropFirst(4)
            guard let colon = rest.lastIndex(of: ":"), let port = Int(rest[rest.index(after: colon)...]) else { return nil }
            let host = String(rest[..<colon])
            guard Loopback.isLiteral(host) else { return nil }
            self = .tcp(host: unbracketed(host), port: port)
        } else {
            return nil
        }
    }

    /// Socket activation: one socket passed to this process.
    static func systemd() -> ListenAddress? {
        let environment = ProcessInfo.processInfo.environment
        guard environment["LISTEN_PID"].flatMap(Int32.init) == getpid(), environment["LISTEN_FDS"] == "1" else {
            return nil
        }
        return .inherited(3)
    }
}

/// `text` without the `[` and `]` at its ends, however many (an IPv6 literal as a URL writes it);
/// what Foundation's `trimmingCharacters(in: CharacterSet(charactersIn: "[]"))` returns.
func unbracketed(_ text: String) -> String {
    let scalars = text.unicodeScalars
    let isBracket = { (scalar: Unicode.Scalar) in scalar == "[" || scalar == "]" }
    guard let first = scalars.firstIndex(where: { !isBracket($0) }), let last = scalars.lastIndex(where: { !isBracket($0) })
    else { return "" }
    return String(scalars[first...last])
}
