import NIOCore
import NIOEmbedded
import NIOSSL

/// TLS for an upstream connection: NIOSSL's client handler in a channel of
/// its own that touches no socket. The socket's bytes go in as ciphertext and
/// come out as plaintext, and the other way; the handshake starts when the
/// filter is made and what it sends leaves with the first flush. Made, used
/// and disposed of on one loop.
final class TLSFilter {
    private let channel = EmbeddedChannel()

    /// `peer` is the address the socket connects to: the handler checks a certificate's IP
    /// addresses against it (and its names against `serverHostname`).
    init(context: NIOSSLContext, serverHostname: String?, peer: SocketAddress) throws {
        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverHostname))
        // Makes the channel active, which starts the handshake.
        try channel.connect(to: peer).wait()
    }

    /// The connection is still up at the TLS level (no close_notify came, no alert ended it).
    var isOpen: Bool { channel.isActive }

    /// Ciphertext from the socket; the plaintext it holds.
    func decrypt(_ bytes: ByteBuffer) throws -> [ByteBuffer] {
        try channel.writeInbound(bytes)
        var plain: [ByteBuffer] = []
        while let piece = try channel.readInbound(as: ByteBuffer.self) { plain.append(piece) }
        return plain
    }

    func write(_ bytes: ByteBuffer) { channel.write(bytes, promise: nil) }

    func flush() throws {
        channel.flush()
        try channel.throwIfErrorCaught()
    }

    /// Ciphertext for the socket: what writes, flushes and the handshake made.
    func encrypted() -> [ByteBuffer] {
        channel.embeddedEventLoop.run()  // work the handler left for its loop (writes it queued during the handshake)
        var out: [ByteBuffer] = []
        while let piece = try? channel.readOutbound(as: ByteBuffer.self) { out.append(piece) }
        return out
    }

    /// close_notify, for the socket about to close; nothing when the connection is already over.
    func closing() -> [ByteBuffer] {
        guard channel.isActive else { return [] }
        channel.close(promise: nil)
        return encrypted()
    }

    /// The socket is closed: the handler's close (and its wait for the server's close_notify, which
    /// will not come) ends now, and the channel lets go of the handler, so that nothing is kept.
    func dispose() {
        if channel.isActive { channel.close(promise: nil) }
        channel.embeddedEventLoop.advanceTime(by: .hours(1))
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
