import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// A piece of a message after its head.
enum BodyPiece {
    case data(ByteBuffer)
    case end
}

/// A message body read off the bytes as they come: a length, chunks (RFC 9112
/// §7.1, trailers read and dropped) or everything until the connection closes.
/// Data is passed on as slices of the bytes read, never copied.
struct BodyReader {
    typealias Framing = BodyFraming
    private enum State {
        case length(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkEnd
        case trailers(read: Int)
        case untilClose
        case done
    }
    private var state: State

    init(_ framing: Framing) {
        switch framing {
        case .length(let length): state = .length(remaining: length)
        case .chunked: state = .chunkSize
        case .untilClose: state = .untilClose
        }
    }

    /// The body is read until the connection closes.
    var endsWithConnection: Bool {
        if case .untilClose = state { true } else { false }
    }

    /// The next piece from `buffer`, or nil while more bytes are needed.
    mutating func read(_ buffer: inout ByteBuffer) throws(WireError) -> BodyPiece? {
        while true {
            switch state {
            case .done:
                return .end
            case .length(let remaining):
                if remaining == 0 {
                    state = .done
                    return .end
                }
                guard buffer.readableBytes > 0 else { return nil }
                let count = min(remaining, buffer.readableBytes)
                state = .length(remaining: remaining - count)
                return .data(buffer.readSlice(length: count)!)
            case .untilClose:
                guard buffer.readableBytes > 0 else { return nil }
                return .data(buffer.readSlice(length: buffer.readableBytes)!)
            case .chunkData(let remaining):
                guard buffer.readableBytes > 0 else { return nil }
                let count = min(remaining, buffer.readableBytes)
                state = count == remaining ? .chunkEnd : .chunkData(remaining: remaining - count)
                return .data(buffer.readSlice(length: count)!)
            case .chunkEnd:
                guard buffer.readableBytes >= 2 else { return nil }
                guard buffer.readInteger(as: UInt16.self) == 0x0D0A else { throw .bad("a chunk does not end with CRLF") }
                state = .chunkSize
            case .chunkSize:
                guard let line = try Self.line(&buffer) else { return nil }
                let size = try Self.chunkSize(line)
                state = size == 0 ? .trailers(read: 0) : .chunkData(remaining: size)
            case .trailers(let read):
                let before = buffer.readableBytes
                guard let line = try Self.line(&buffer) else {
                    if read + buffer.readableBytes > Wire.maximumTrailers { throw .bad("the trailer section is too long") }
                    return nil
                }
                let total = read + before - buffer.readableBytes
                guard total <= Wire.maximumTrailers else { throw .bad("the trailer section is too long") }
                guard line.readableBytes > 0 else {
                    state = .done
                    return .end
                }
                guard line.readableBytesView.allSatisfy(Wire.isValueByte) else { throw .bad("a trailer line has a control character") }
                state = .trailers(read: total)
            }
        }
    }

    /// A line without its CRLF, taken from `buffer`; nil while it is not whole.
    private static func line(_ buffer: inout ByteBuffer) throws(WireError) -> ByteBuffer? {
        let found = buffer.withUnsafeReadableBytes { p -> Int? in
            guard p.count > 0, let lf = memchr(p.baseAddress!, 0x0A, p.count) else { return nil }
            return UnsafeRawPointer(lf) - p.baseAddress!
        }
        guard let lf = found else {
            if buffer.readableBytes > Wire.maximumChunkLine { throw .bad("a chunk-size line is too long") }
            return nil
        }
        guard lf > 0, buffer.getInteger(at: buffer.readerIndex + lf - 1, as: UInt8.self) == 0x0D else {
            throw .bad("a line ends in LF without CR")
        }
        guard lf <= Wire.maximumChunkLine else { throw .bad("a chunk-size line is too long") }
        let line = buffer.readSlice(length: lf - 1)!
        buffer.moveReaderIndex(forwardBy: 2)
        return line
    }

    /// RFC 9112 §7.1: chunk-size [ chunk-ext ]; the extensions are dropped.
    private static func chunkSize(_ line: ByteBuffer) throws(WireError) -> Int {
        var size = 0
        var digits = 0
        for byte in line.readableBytesView {
            let value: Int
            switch byte {
            case 0x30...0x39: value = Int(byte - 0x30)
            case 0x41...0x46: value = Int(byte - 0x41 + 10)
            case 0x61...0x66: value = Int(byte - 0x61 + 10)
            default:
                guard digits > 0 else { throw .bad("a chunk-size is not hexadecimal") }
                let rest = line.readableBytesView.dropFirst(digits).drop { $0 == 0x20 || $0 == 0x09 }
                guard rest.first == UInt8(ascii: ";"), rest.allSatisfy(Wire.isValueByte) else {
                    throw .bad("a chunk-size is followed by something other than an extension")
                }
                return size
            }
            digits += 1
            guard digits <= 15 else { throw .bad("a chunk-size is too large") }
            size = size << 4 | value
        }
        guard digits > 0 else { throw .bad("a chunk-size is missing") }
        return size
    }
}
