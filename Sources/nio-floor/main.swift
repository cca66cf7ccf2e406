// Bench-only: the least a SwiftNIO server can do per call, to put tokend's CPU
// per call next to NIO's own floor (`make bench` measures both with the same
// load client). Answers every NUL-terminated request on a Unix socket with a
// fixed reply of the size given, on the event loop, one write per read burst.
//
//     nio-floor SOCKET REPLY_BYTES
import Foundation
import NIOCore
import NIOPosix

final class CannedReply: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let reply: ByteBuffer
    var pending: ByteBuffer?

    init(reply: ByteBuffer) {
        self.reply = reply
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let frames = buffer.readableBytesView.reduce(0) { $1 == 0 ? $0 + 1 : $0 }
        guard frames > 0 else { return }
        if frames == 1, pending == nil {
            pending = reply
            return
        }
        var out = pending ?? context.channel.allocator.buffer(capacity: reply.readableBytes * frames)
        for _ in 0..<frames { out.writeImmutableBuffer(reply) }
        pending = out
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard let out = pending else { return }
        pending = nil
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 3, let size = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: nio-floor SOCKET REPLY_BYTES\n".utf8))
    exit(64)
}
var bytes = [UInt8](repeating: UInt8(ascii: "x"), count: max(1, size - 1))
bytes.append(0)
let reply = ByteBuffer(bytes: bytes)
let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
    .serverChannelOption(.backlog, value: 4096)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(CannedReply(reply: reply)) }
    }
    .bind(unixDomainSocketPath: arguments[1], cleanupExistingSocketFile: true).wait()
FileHandle.standardOutput.write(Data("ready\n".utf8))
try channel.closeFuture.wait()
