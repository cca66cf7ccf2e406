import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A request as the scripted server read it.
struct Received: Sendable {
    var head: String
    var body: [UInt8]

    func header(_ name: String) -> String? {
        head.split(separator: "\r\n").dropFirst().first { $0.lowercased().hasPrefix(name.lowercased() + ":") }
            .map { String($0.dropFirst(name.count + 1).drop { $0 == " " }) }
    }
}

/// What the server does once it has read a request.
enum Script: Sendable {
    /// These bytes, exactly, then the connection is closed.
    case reply(String)
    /// The bytes, and the connection is held open.
    case replyAndHold(String)
    /// Nothing: the connection stays open, silent.
    case silent
    /// The connection is closed at once.
    case close
    /// These bytes, then the TCP connection is closed under TLS, without its close_notify.
    case replyAndCut(String)
}

/// The first handler of a TLS connection, next to the socket: a close from here
/// passes no TLS handler, so the connection ends without close_notify.
final class Cutter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
}

/// An HTTP/1.1 server on 127.0.0.1 that answers with raw bytes, so a test can
/// send what no well-behaved server would. It counts the connections it
/// accepts and the ones that closed, so a test can show the client closed its own.
final class ScriptedServer: Sendable {
    let channel: any Channel
    let port: Int
    let counts: Counts

    final class Counts: Sendable {
        let accepted = Mutex(0)
        let closed = Mutex(0)
        let requests = Mutex<[Received]>([])
    }

    var accepted: Int { counts.accepted.withLock { $0 } }
    var closed: Int { counts.closed.withLock { $0 } }
    var requests: [Received] { counts.requests.withLock { $0 } }

    init(tls: NIOSSLContext? = nil, _ script: @escaping @Sendable (Received) -> Script) async throws {
        let counts = Counts()
        self.counts = counts
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    counts.accepted.withLock { $0 += 1 }
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(Cutter())
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    }
                    try channel.pipeline.syncOperations.addHandler(ScriptHandler(script: script, counts: counts))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress!.port!
    }

    func stop() async {
        try? await channel.close()
    }
}

final class ScriptHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let script: @Sendable (Received) -> Script
    let counts: ScriptedServer.Counts
    var buffer: [UInt8] = []
    var answered = false

    init(script: @escaping @Sendable (Received) -> Script, counts: ScriptedServer.Counts) {
        self.script = script
        self.counts = counts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        buffer += Array(buffer: unwrapInboundIn(data))
        guard !answered, let end = buffer.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound else { return }
        let head = String(decoding: buffer[..<end], as: UTF8.self)
        var request = Received(head: head, body: [])
        let length = request.header("Content-Length").flatMap { Int($0) } ?? 0
        guard buffer.count >= end + length else { return }
        request.body = Array(buffer[end..<(end + length)])
        answered = true
        counts.requests.withLock { $0.append(request) }
        switch script(request) {
        case .reply(let text):
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text))).whenComplete { _ in channel.close(promise: nil) }
        case .replyAndHold(let text):
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text)), promise: nil)
        case .replyAndCut(let text):
            let pipeline = context.pipeline
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text))).whenComplete { _ in
                (try? pipeline.syncOperations.context(handlerType: Cutter.self))?.close(promise: nil)
            }
        case .silent:
            break
        case .close:
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        counts.closed.withLock { $0 += 1 }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
