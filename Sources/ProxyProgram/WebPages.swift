import NIOCore
import NIOHTTP1

/// Who may send a request through the proxy, as far as web pages go: the
/// project's one web-page rule (HTTPHead's `WebPageRule`) with the proxy's
/// own addresses. Every request gets the session's token, so no page but the
/// proxy's own (the upstream's, served through it) may send one. Programs send
/// no Origin and no Sec-Fetch-Site, and name the address they connected to as
/// Host.
struct WebPages: Sendable {
    let rule: WebPageRule

    /// The Host values that name this proxy ("127.0.0.1:8080", "localhost:8080"); nil on a Unix socket,
    /// which no page can reach and whose Host is whatever the client makes up.
    var hosts: Set<String>? { rule.hosts }

    /// From the address the listener is bound to (after binding: a passed socket, port 0).
    init(listeningOn address: SocketAddress?) {
        guard let address, let port = address.port, let ip = address.ipAddress else {
            rule = WebPageRule(hosts: nil, listener: "the proxy")
            return
        }
        rule = WebPageRule(listener: "the proxy", ip: ip, port: port)
    }

    /// The answer for a request a web page may have sent, or nil to serve it.
    func refusal(for head: RequestHead) -> Answer? {
        let refusal = head.bytes.withUnsafeReadableBytes { rule.refusal(head.fields.section, in: $0) }
        return refusal.map { Answer(status: HTTPResponseStatus(statusCode: $0.status), message: $0.message) }
    }
}
