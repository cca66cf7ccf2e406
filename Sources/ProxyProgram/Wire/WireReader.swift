import NIOCore

/// The bytes of one direction of a connection, read as heads and bodies one
/// after another; what the request and response decoders share.
struct MessageReader {
    private var buffer = ByteBuffer()
    /// Where the head being read ends, searched as its bytes come.
    private var scanner = HeadScanner(limits: Wire.limits)
    /// The body being read; nil while a head is.
    var body: BodyReader?

    /// Bytes read and not yet given out.
    var hasBytes: Bool { buffer.readableBytes > 0 }
    /// The memory the bytes kept take.
    var capacity: Int { buffer.capacity }

    /// More bytes, after those not yet read. What was read is dropped once it is half of what is kept,
    /// so the buffer holds at most twice what is not yet read (a head, a chunk-size line) plus one read,
    /// and a head that comes a byte at a time is copied a bounded number of times per byte.
    mutating func append(_ bytes: ByteBuffer) {
        if buffer.readableBytes == 0 {
            buffer = bytes
            return
        }
        if buffer.readerIndex > buffer.readableBytes { buffer.discardReadBytes() }
        buffer.writeImmutableBuffer(bytes)
    }

    /// The next piece of the body being read, or nil while more bytes are needed.
    mutating func bodyPiece() throws(WireError) -> BodyPiece? {
        let piece = try body?.read(&buffer)
        if case .end? = piece { body = nil }
        return piece
    }

    /// RFC 9112 §2.2: empty lines before a request line are ignored.
    mutating func skipEmptyLines() {
        while buffer.readableBytes >= 2, buffer.getInteger(at: buffer.readerIndex, as: UInt16.self) == 0x0D0A {
            scanner.reset()
            buffer.moveReaderIndex(forwardBy: 2)
        }
    }

    /// The next whole head, or nil while more bytes are needed; 431 past `Wire.limits`.
    mutating func head() throws(WireError) -> ByteBuffer? {
        guard buffer.readableBytes > 0 else { return nil }
        var scanner = self.scanner
        let found = buffer.withUnsafeReadableBytes { p in Result { () throws(HeadError) in try scanner.headLength(p) } }
        self.scanner = scanner
        switch found {
        case .success(let length?): return buffer.readSlice(length: length)!
        case .success(nil): return nil
        case .failure(let error): throw WireError(error)
        }
    }
}
