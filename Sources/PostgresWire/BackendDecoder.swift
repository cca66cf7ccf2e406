import NIOCore

/// Frames the server's bytes into messages. A message's length is the server's to say and is
/// capped: nothing larger than `limit` is buffered.
struct BackendDecoder: ByteToMessageDecoder {
    typealias InboundOut = BackendMessage

    /// Fleet's rows are a sealed record each; 16 MiB is far above any.
    static let defaultLimit = 16 << 20

    /// A notification's body: its payload (a server caps it at 8,000 bytes), channel name and process ID.
    static let notificationLimit = (8 << 10) + 256
    /// A ParameterStatus's name and value (server_version, TimeZone, search_path…).
    static let parameterStatusLimit = 8 << 10

    let limit: Int
    /// The next byte answers SSLRequest.
    var awaitingSSLResponse: Bool

    init(awaitingSSLResponse: Bool, limit: Int = Self.defaultLimit) {
        self.awaitingSSLResponse = awaitingSSLResponse
        self.limit = limit
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let message = try next(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(message))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        while let message = try next(&buffer) { context.fireChannelRead(Self.wrapInboundOut(message)) }
        return .needMoreData
    }

    /// The next whole message in `buffer`, nil when it is not all there yet.
    mutating func next(_ buffer: inout ByteBuffer) throws(PostgresError) -> BackendMessage? {
        if awaitingSSLResponse {
            guard let answer = buffer.readInteger(as: UInt8.self) else { return nil }
            // Bytes after the answer came before TLS, from anyone on the path (CVE-2021-23222).
            guard buffer.readableBytes == 0 else {
                throw PostgresError(.protocolViolation, "the server sent data after its answer to SSLRequest")
            }
            awaitingSSLResponse = false
            switch answer {
            case UInt8(ascii: "S"): return .sslResponse(true)
            case UInt8(ascii: "N"): return .sslResponse(false)
            // An old server answers SSLRequest with an ErrorResponse: no TLS there.
            case UInt8(ascii: "E"): return .sslResponse(false)
            default: throw PostgresError(.protocolViolation, "the server answered SSLRequest with byte \(answer)")
            }
        }
        guard let (type, body) = try Self.frame(&buffer, limit: limit) else { return nil }
        var message = body
        return try BackendMessage.parse(type: type, body: &message)
    }

    /// Splits one message (type byte, length, body) off `buffer`.
    static func frame(_ buffer: inout ByteBuffer, limit: Int) throws(PostgresError) -> (UInt8, ByteBuffer)? {
        guard let type = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
            let length = buffer.getInteger(at: buffer.readerIndex + 1, as: Int32.self)
        else { return nil }
        guard length >= 4, Int(length) - 4 <= limit else {
            throw PostgresError(.protocolViolation, "message length \(length) out of bounds (limit \(limit))")
        }
        // Kept while nobody asks (notifications, ParameterStatus): smaller, and refused before buffered.
        let kept: (name: String, limit: Int)? =
            switch type {
            case UInt8(ascii: "A"): ("NotificationResponse", notificationLimit)
            case UInt8(ascii: "S"): ("ParameterStatus", parameterStatusLimit)
            default: nil
            }
        if let kept, Int(length) - 4 > kept.limit {
            throw PostgresError(.protocolViolation, "a \(kept.name) of \(Int(length) - 4) bytes (limit \(kept.limit))")
        }
        guard buffer.readableBytes >= 1 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 5)
        guard let body = buffer.readSlice(length: Int(length) - 4) else { return nil }
        return (type, body)
    }
}
