import NIOCore
import NIOEmbedded
import NIOSSL

/// TLS for an upstream connection: NIOSSL's client handler in a channel of
/// its own that touches no socket. The socket's bytes go in as ciphertext and
/// come out as plaintext, and the other way; the handshake starts when the
/// filter is made and what it sends leaves with the first flush.
final class TLSFilter {
    private let channel = EmbeddedChannel()

    init(context: NIOSSLContext, serverHostname: String?) throws {
        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverHostname))
        // Makes the channel active, which starts the handshake; the address is not used.
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
    }

    /// The connection is still up at the TLS level (no close_notify came).
    var isOpen: Bool { channel.isActive }

    /// Ciphertext from the socket; the plaintext it holds.
    func decrypt(_ bytes: ByteBuffer) throws -> [ByteBuffer] {
        try channel.writeInbound(bytes)
        var plain: [ByteBuffer] = []
        while let piece = try channel.readInbound(as: ByteBuffer.self) { plain.append(piece) }
        return plain
    }

    func write(_ bytes: ByteBuffer) { channel.write(bytes, promise: nil) }

    func flush() { channel.flush() }

    /// Ciphertext for the socket: what writes, flushes and the handshake made.
    func encrypted() -> [ByteBuffer] {
        channel.embeddedEventLoop.run()  // work the handler left for its loop (writes it queued during the handshake)
        var out: [ByteBuffer] = []
        while let piece = try? channel.readOutbound(as: ByteBuffer.self) { out.append(piece) }
        return out
    }

    /// close_notify, for the socket about to close.
    func closing() -> [ByteBuffer] {
        channel.close(promise: nil)
        return encrypted()
    }
}
