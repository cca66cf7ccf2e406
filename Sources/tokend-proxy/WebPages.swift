import NIOCore

/// Who may send a request through the proxy, as far as web pages go. Every
/// request gets the session's token, so a page must not be able to send one:
/// not a page on another site (a cross-site `no-cors` POST needs no
/// permission), not a page on another loopback port (same-site, but another
/// origin), not a page whose name was rebound to 127.0.0.1 (its Host is
/// that name). Programs send no Origin and no Sec-Fetch-Site, and name the
/// address they connected to as Host.
struct WebPages: Sendable {
    /// The Host values that name this proxy ("127.0.0.1:8080", "localhost:8080"); nil on a Unix socket,
    /// which no page can reach and whose Host is whatever the client makes up.
    let hosts: Set<String>?
    /// The same, as bytes: a request's Host is compared where it lies.
    private let hostBytes: [[UInt8]]

    /// From the address the listener is bound to (after binding: a passed socket, port 0).
    init(listeningOn address: SocketAddress?) {
        guard let address, let port = address.port, let ip = address.ipAddress else {
            hosts = nil
            hostBytes = []
            return
        }
        let literal = address.protocol == .inet6 ? "[\(ip)]" : ip
        // RFC 9110 §7.2: a Host without a port means the scheme's default, 80 for http.
        let ports = port == 80 ? [":80", ""] : [":\(port)"]
        let names = Set([literal.lowercased(), "localhost"].flatMap { name in ports.map { name + $0 } })
        hosts = names
        hostBytes = names.map { Array($0.utf8) }
    }

    /// The answer for a request a web page may have sent, or nil to serve it.
    func refusal(for head: RequestHead) -> Answer? {
        if let hosts {
            guard head.fields.only(.host, isOneOf: hostBytes) else {
                return Answer(
                    status: .misdirectedRequest,
                    message: "the Host must be the address the proxy listens on (\(hosts.sorted().joined(separator: ", "))); "
                        + "another name is what a page sends after rebinding its DNS name to this address")
            }
        }
        // The proxy's own pages (the upstream's, served through it) may call it; no other origin may.
        for origin in head.values(.origin) {
            guard let hosts, origin.hasPrefix("http://"), hosts.contains(String(origin.dropFirst(7)).lowercased()) else {
                return Answer(
                    status: .forbidden, message: "a request from the web page \(origin.prefix(100)) is refused: only the proxy's own origin may use it")
            }
        }
        for site in head.values(.secFetchSite) where site != "same-origin" && site != "none" {
            return Answer(
                status: .forbidden, message: "a request a browser marks Sec-Fetch-Site: \(site.prefix(20)) is refused: only the proxy's own origin may use it")
        }
        return nil
    }
}
