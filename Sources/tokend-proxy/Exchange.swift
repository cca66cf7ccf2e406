import NIOCore
import NIOHTTP1

/// One request on its way through the proxy: the client's head and body, what
/// tokend gave for it, the upstream connection serving it and how far its
/// answer has come.
final class Exchange {
    let head: HTTPRequestHead
    /// The request target under the upstream's path prefix.
    let uri: String
    /// The upstream URL (for cookies and logs), made when one of them needs it.
    var url: String { upstreamBase + uri }
    private let upstreamBase: String
    /// The target's path, without the query: what a Cookie header depends on.
    let path: Substring

    /// The body, kept whole up to --buffer-limit while the budget lasts, so that a 401 can be retried.
    var kept = ByteBuffer()
    /// Bytes of `kept` taken from the body budget.
    var budgeted = 0
    /// The body did not fit: it streams to the upstream, and a 401 goes back to the client.
    var streaming = false
    /// Streamed chunks not yet sent upstream (the upstream connection is not there yet).
    var pending: [ByteBuffer] = []
    /// The client's body is whole (its end came).
    var bodyDone = false

    var credentials: RequestCredentials?
    var upstream: UpstreamConnection?
    /// The connection it went out on served a request before.
    var upstreamWasReused = false
    /// The request's end went upstream.
    var sent = false
    /// The answer has begun: a byte came from the upstream connection.
    var answered = false
    /// Sent again after a 401 with a refreshed token, or on a new connection after a kept one failed.
    var retried = false
    var reconnected = false
    /// The upstream's head, body and end, held while tokend is asked (a 401's refresh, its Set-Cookie).
    var held: [HTTPClientResponsePart]?
    var relayedHead = false
    var upstreamEnded = false
    var upstreamKeepAlive = true

    init(head: HTTPRequestHead, upstream: Upstream, target: String, path: Substring) {
        self.head = head
        upstreamBase = upstream.base
        uri = upstream.prefix.isEmpty ? target : upstream.prefix + target
        self.path = path
    }

    /// The request head the upstream gets.
    func upstreamHead(host: String, credentials: RequestCredentials) -> HTTPRequestHead {
        var headers = Headers.forwarded(head.headers, host: host, authorization: credentials.authorization, cookies: credentials.cookies)
        if !streaming {
            // The body is whole: its length is known, whatever framing the client used.
            headers.remove(name: "Content-Length")
            if kept.readableBytes > 0 || [.POST, .PUT, .PATCH].contains(head.method) || head.headers.contains(name: "Content-Length") {
                headers.add(name: "Content-Length", value: String(kept.readableBytes))
            }
        } else if !headers.contains(name: "Content-Length") {
            headers.add(name: "Transfer-Encoding", value: "chunked")
        }
        return HTTPRequestHead(version: .http1_1, method: head.method, uri: uri, headers: headers)
    }
}
