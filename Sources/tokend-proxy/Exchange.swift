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
    var held: [ResponsePart]?
    var relayedHead = false
    /// tokend's jar took the answer's Set-Cookie: the client's head goes without it.
    var cookiesInJar = false
    var upstreamKeepAlive = true
    /// The body goes upstream in chunks (it streams, and the client gave no length).
    var upstreamChunked: Bool { streaming && head.contentLength == nil }
    /// The answer's body goes to the client in chunks; the connection closes after the answer.
    var clientChunked = false
    var closeAfter = false

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
