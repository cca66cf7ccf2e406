import NIOCore
import NIOPosix

@testable import PostgresWire

/// A PostgreSQL server on loopback that answers as a test scripts it: SSLRequest, startup, and
/// each statement (one per Sync). A hostile server, a pooler or whoever is on the path.
final class ScriptedPostgres: Sendable {
    enum Event: Sendable {
        case sslRequest
        case startup
        /// The statement's number, from 1.
        case statement(Int)
    }

    typealias Script = @Sendable (Event) -> [ByteBuffer]

    let server: any Channel

    var port: Int { server.localAddress?.port ?? 0 }

    /// `stopsReading`: after answering startup, the server reads nothing more.
    init(stopsReading: Bool = false, _ script: @escaping Script) async throws {
        server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Answerer(script: script, stopsReading: stopsReading))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() {
        server.close(promise: nil)
    }

    func connect(tls: PostgresConnection.Configuration.TLS = .disable) async throws -> PostgresConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).get()
        let configuration = PostgresConnection.Configuration(user: "tokend", database: "tokend", password: nil, tls: tls)
        return try await PostgresConnection.connect(on: channel, configuration: configuration)
    }

    /// `type`, a length, `body`: one backend message.
    static func message(_ type: Character, _ body: [UInt8] = []) -> ByteBuffer {
        BackendMessageTests.message(type, body)
    }

    static func string(_ text: String) -> [UInt8] { Array(text.utf8) + [0] }

    /// AuthenticationOk, ReadyForQuery.
    static let ready = [message("R", [0, 0, 0, 0]), message("Z", [UInt8(ascii: "I")])]

    /// ParseComplete, BindComplete, NoData, CommandComplete, ReadyForQuery.
    static func done(_ tag: String) -> [ByteBuffer] {
        [message("1"), message("2"), message("n"), message("C", string(tag)), message("Z", [UInt8(ascii: "I")])]
    }

    static func notification(_ channel: String, _ payload: String) -> ByteBuffer {
        message("A", [0, 0, 0, 7] + string(channel) + string(payload))
    }

    /// Reads the client's messages and writes the script's answers.
    final class Answerer: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let script: Script
        let stopsReading: Bool
        var buffer = ByteBuffer()
        var started = false
        var statements = 0

        init(script: @escaping Script, stopsReading: Bool) {
            self.script = script
            self.stopsReading = stopsReading
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = unwrapInboundIn(data)
            buffer.writeBuffer(&bytes)
            while let event = next(context: context) {
                for answer in script(event) { context.write(wrapOutboundOut(answer), promise: nil) }
                context.flush()
                if case .startup = event, stopsReading {
                    context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
                    return
                }
            }
        }

        /// The next whole message's event; nil when none is whole yet (or it asks for no answer).
        func next(context: ChannelHandlerContext) -> Event? {
            while true {
                if !started {
                    guard let length = buffer.getInteger(at: buffer.readerIndex, as: Int32.self),
                        buffer.readableBytes >= Int(length), let whole = buffer.readSlice(length: Int(length))
                    else { return nil }
                    if whole.getInteger(at: whole.readerIndex + 4, as: Int32.self) == 80_877_103 { return .sslRequest }
                    started = true
                    return .startup
                }
                guard let type = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
                    let length = buffer.getInteger(at: buffer.readerIndex + 1, as: Int32.self),
                    buffer.readableBytes >= 1 + Int(length)
                else { return nil }
                buffer.moveReaderIndex(forwardBy: 1 + Int(length))
                if type == UInt8(ascii: "S") {
                    statements += 1
                    return .statement(statements)
                }
                if type == UInt8(ascii: "X") {
                    context.close(promise: nil)
                    return nil
                }
            }
        }
    }
}
