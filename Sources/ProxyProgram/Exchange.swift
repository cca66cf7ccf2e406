import NIOCore

/// One request on its way through the proxy: the client's head and body, what
/// tokend gave for it, the upstream connection serving it and how far its
/// answer has come.
final class Exchange {
    let head: RequestHead
    /// The request target under the upstream's path prefix.
    let uri: String
    /// The upstream URL (for cookies and logs), made when one of them needs it.
    var url: String { upstreamBase + uri }
    private let upstreamBase: String
    /// The target's path, without the query: what a Cookie header depends on.
    let path: Substring

    /// The request's side, in order: its body kept (for a retry) or streaming, then whole, then sent.
    enum Request {
        /// The body is read and kept whole, up to --buffer-limit while the budget lasts, so that a 401 can
        /// be retried.
        case keeping
        /// The body did not fit: it streams to the upstream as it comes, and a 401 goes back to the client.
        case streaming
        /// The client's body is whole (`streamed` or kept); its end has not gone upstream yet.
        case whole(streamed: Bool)
        /// The request's end went upstream.
        case sent(streamed: Bool)
    }

    /// The answer's side, in order: awaited, begun, perhaps held while tokend is asked, relayed.
    enum Reply {
        /// No byte of an answer yet (tokend is asked, a connection made, the request sent or going).
        case awaited
        /// A byte came (an interim answer, part of a head): the upstream may have acted on the request.
        case begun
        /// The upstream's head, body and end, held while tokend is asked (a 401's refresh, its Set-Cookie,
        /// a DPoP nonce): the upstream is not read, nor timed, meanwhile.
        case held([ResponsePart])
        /// The head went to the client; the body follows as it comes.
        case relaying(Relay)
    }

    /// How an answer whose head went to the client goes on.
    struct Relay: Equatable {
        /// Its body goes to the client in chunks (the upstream gave no length, the client speaks HTTP/1.1).
        var chunked: Bool
        /// It is an event stream (text/event-stream: MCP's streamable HTTP, server-sent events): it may
        /// stay silent between events up to --stream-idle-timeout rather than --timeout.
        var eventStream: Bool
    }

    private(set) var request = Request.keeping
    var reply = Reply.awaited

    /// The body, kept whole up to --buffer-limit while the budget lasts, so that a 401 can be retried.
    var kept = ByteBuffer()
    /// Bytes of `kept` taken from the body budget.
    var budgeted = 0
    /// Streamed chunks not yet sent upstream (the upstream connection is not there yet).
    var pending: [ByteBuffer] = []

    var credentials: RequestCredentials?
    var upstream: UpstreamConnection?
    /// The connection it went out on served a request before.
    var upstreamWasReused = false
    /// Sent again after a 401 with a refreshed token, or on a new connection after a kept one failed.
    var retried = false
    var reconnected = false
    /// tokend's jar took the answer's Set-Cookie: the client's head goes without it.
    var cookiesInJar = false
    var upstreamKeepAlive = true
    /// The connection closes after the answer.
    var closeAfter = false
    /// The body goes upstream in chunks (it streams, and the client gave no length).
    var upstreamChunked: Bool { streaming && head.contentLength == nil }

    /// The body did not fit what is kept: it streams (and a 401 goes back to the client).
    var streaming: Bool {
        switch request {
        case .keeping, .whole(streamed: false), .sent(streamed: false): false
        case .streaming, .whole(streamed: true), .sent(streamed: true): true
        }
    }
    /// The client's body is whole (its end came).
    var bodyDone: Bool {
        switch request {
        case .keeping, .streaming: false
        case .whole, .sent: true
        }
    }
    /// The request's end went upstream.
    var sent: Bool {
        if case .sent = request { true } else { false }
    }

    /// The body outgrew what is kept: it streams from now on.
    func outgrew() {
        if case .keeping = request { request = .streaming }
    }

    /// The client's body is whole.
    func bodyEnded() {
        switch request {
        case .keeping: request = .whole(streamed: false)
        case .streaming: request = .whole(streamed: true)
        case .whole, .sent: break
        }
    }

    /// The request's end went upstream (again, for a retry).
    func markSent() {
        request = .sent(streamed: streaming)
    }

    /// The answer's head went to the client.
    var relayedHead: Bool {
        if case .relaying = reply { true } else { false }
    }
    /// How the answer being relayed goes on (nil: its head has not gone to the client).
    var relay: Relay? {
        if case .relaying(let relay) = reply { relay } else { nil }
    }
    /// The answer waits for tokend.
    var isHeld: Bool {
        if case .held = reply { true } else { false }
    }
    /// What is held came to its end: the answer is whole.
    var heldWhole: Bool {
        if case .held(let parts) = reply, case .end? = parts.last { true } else { false }
    }
    /// A byte of an answer came: the upstream may have acted on the request.
    func answerBegan() {
        if case .awaited = reply { reply = .begun }
    }

    init(head: RequestHead, upstream: Upstream, target: String, path: Substring) {
        self.head = head
        upstreamBase = upstream.base
        uri = upstream.prefix.isEmpty ? target : upstream.prefix + target
        self.path = path
    }

    /// The request head the upstream gets, and the body after it when the body is whole.
    func upstreamRequest(credentialLines: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer {
        var length: Int?
        if !streaming {
            // The body is whole: its length is known, whatever framing the client used.
            if kept.readableBytes > 0 || head.method == .post || head.method == .put || head.method == .patch || head.contentLength != nil {
                length = kept.readableBytes
            }
        } else {
            length = head.contentLength
        }
        var bytes = allocator.buffer(
            capacity: head.bytes.readableBytes + uri.utf8.count + credentialLines.readableBytes + (streaming ? 0 : kept.readableBytes) + 64)
        bytes.writeUpstreamHead(head, uri: uri, credentialLines: credentialLines, length: length, chunked: upstreamChunked)
        if !streaming { bytes.writeImmutableBuffer(kept) }
        return bytes
    }

    /// A piece of a streamed body, in the upstream's framing.
    func writeBody(_ chunk: ByteBuffer, to connection: UpstreamConnection) {
        guard chunk.readableBytes > 0 else { return }
        if upstreamChunked {
            var size = ByteBuffer()
            size.writeChunkSize(chunk.readableBytes)
            connection.write(size)
            connection.write(chunk)
            connection.write(Wire.crlf)
        } else {
            connection.write(chunk)
        }
    }
}
