import NIOCore
import Varlink

/// Splits a byte stream into NUL-terminated frames (the terminator removed).
///
/// A frame longer than `maximumFrameLength` raises `FrameTooLarge` before it
/// is buffered further, so a client cannot make the server hold more than the
/// cap for one connection.
public struct NULFrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer

    public let maximumFrameLength: Int
    /// Bytes already searched for a NUL, so partial frames are scanned once.
    private var scanned = 0

    public init(maximumFrameLength: Int) {
        self.maximumFrameLength = maximumFrameLength
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = try nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    public mutating func decodeLast(
        context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool
    ) throws -> DecodingState {
        while let frame = try nextFrame(&buffer) {
            context.fireChannelRead(wrapInboundOut(frame))
        }
        return .needMoreData
    }

    /// The next whole frame, if the buffer holds one. Pure: testable without a channel.
    public mutating func nextFrame(_ buffer: inout ByteBuffer) throws(FrameTooLarge) -> ByteBuffer? {
        let scanned = self.scanned
        let scan = buffer.withUnsafeReadableBytes { NULFraming.scan($0, scanned: scanned, limit: maximumFrameLength) }
        switch scan {
        case .incomplete(let scanned):
            self.scanned = scanned
            return nil
        case .tooLarge:
            throw FrameTooLarge(limit: maximumFrameLength)
        case .frame(let length):
            self.scanned = 0
            let frame = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            return frame
        }
    }
}

public struct FrameTooLarge: Error, Equatable, CustomStringConvertible {
    public let limit: Int
    public var description: String { "message larger than \(limit) bytes" }
}
