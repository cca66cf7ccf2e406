import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOTLS

/// One request's connection and answer. Its mutable members are touched on
/// `loop` only (the connection's loop); `finish` is the one way out, and it
/// closes the connection, so no path leaves one open: answer, error,
/// deadline and cancellation all end there.
final class Exchange: @unchecked Sendable {
    let request: HTTPRequest
    let target: RequestTarget
    let loop: any EventLoop
    let tls: NIOSSLContext?
    let limit: Int
    let deadline: NIODeadline
    let connectTimeout: TimeAmount
    let promise: EventLoopPromise<HTTPResponse>

    private var finished = false
    private var channel: (any Channel)?
    private var timer: Scheduled<Void>?
    private var head: HTTPResponseHead?
    private var body = ByteBuffer()

    /// The server as errors name it.
    var server: String { target.host.contains(":") ? "[\(target.host)]:\(target.port)" : "\(target.host):\(target.port)" }

    init(
        request: HTTPRequest, target: RequestTarget, loop: any EventLoop, tls: NIOSSLContext?, limit: Int,
        deadline: NIODeadline, connectTimeout: TimeAmount
    ) {
        self.request = request
        self.target = target
        self.loop = loop
        self.tls = tls
        self.limit = limit
        self.deadline = deadline
        self.connectTimeout = connectTimeout
        promise = loop.makePromise()
    }

    func start(at address: SocketAddress?) {
        loop.execute { self.connect(to: address) }
    }

    func cancel() {
        loop.execute { self.finish(.failure(.cancelled)) }
    }

    private func connect(to address: SocketAddress?) {
        guard !finished else { return }
        let left = deadline - .now()
        guard left > .zero else { return finish(.failure(.deadlineExceeded)) }
        timer = loop.scheduleTask(deadline: deadline) { self.finish(.failure(.deadlineExceeded)) }
        let cutByDeadline = left < connectTimeout
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(min(left, connectTimeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try self.configure(channel) }
            }
        let connecting = address.map { bootstrap.connect(to: $0) } ?? bootstrap.connect(host: target.host, port: target.port)
        connecting.whenComplete { result in
            switch result {
            case .failure(let error):
                self.finish(.failure(.connecting(error, to: self.server, cutByDeadline: cutByDeadline)))
            case .success(let channel):
                // Finished while connecting (deadline, cancellation): the late connection is closed at once.
                guard !self.finished else { return channel.close(promise: nil) }
                self.channel = channel
                // Over TLS, nothing is written before the server has shown it is the URL's host.
                if self.tls == nil { self.write(on: channel) }
            }
        }
    }

    private func configure(_ channel: any Channel) throws {
        let pipeline = channel.pipeline.syncOperations
        if let tls {
            // SNI carries a name only (RFC 6066 §3); with an IP literal NIOSSL checks the certificate against the address.
            let name = target.isIPLiteral ? nil : target.host
            try pipeline.addHandler(NIOSSLClientHandler(context: tls, serverHostname: name))
        }
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderListSize = 64 * 1024
        limits.maxHeaderFieldCount = 256
        try pipeline.addHTTPClientHandlers(
            leftOverBytesStrategy: .dropBytes, enableOutboundHeaderValidation: true, decoderLimitConfiguration: limits)
        try pipeline.addHandler(ResponseReader(self))
    }

    /// Headers the exchange sets itself: the caller's would contradict how the request is framed.
    static let ownHeaders: Set<String> = ["host", "content-length", "transfer-encoding", "connection"]

    private func write(on channel: any Channel) {
        let method = HTTPMethod(rawValue: request.method.uppercased())
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: target.path)
        head.headers.add(name: "Host", value: target.hostHeader)
        for (name, value) in request.headers where !Self.ownHeaders.contains(name.lowercased()) {
            head.headers.add(name: name, value: value)
        }
        if !request.body.isEmpty || [.POST, .PUT, .PATCH].contains(method) {
            head.headers.add(name: "Content-Length", value: String(request.body.count))
        }
        // One connection per request: nothing is pooled, so nothing is kept open.
        head.headers.add(name: "Connection", value: "close")
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if !request.body.isEmpty {
            channel.write(HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: request.body))), promise: nil)
        }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil)).whenFailure { error in
            // A server may answer and close before reading all of the request; its answer counts.
            guard self.head == nil else { return }
            self.finish(.failure(.during(error, with: self.server)))
        }
    }

    /// The handshake verified the chain (and NIOSSL the name or address); the name is checked here.
    func handshakeCompleted() {
        guard !finished, let channel else { return }
        if !target.isIPLiteral {
            let certificate = try? channel.pipeline.syncOperations.nioSSL_peerCertificate()
            let names = certificate.map(ServerIdentity.dnsNames) ?? []
            guard names.contains(where: { ServerIdentity.matches(target.host, $0) }) else {
                let named = names.isEmpty ? "no host name" : names.prefix(4).joined(separator: ", ")
                return finish(.failure(HTTPExchangeError(
                    .tls, "TLS with \(server) failed: certificate verification failed: the certificate is not for \(target.host) (it names \(named))")))
            }
        }
        write(on: channel)
    }

    func owns(_ channel: any Channel) -> Bool {
        self.channel === channel
    }

    func received(_ part: HTTPClientResponsePart) {
        guard !finished else { return }
        switch part {
        case .head(let received):
            let code = received.status.code
            // Interim answers (100 Continue, 103 Early Hints) come before the final one.
            if (100..<200).contains(code), code != 101 { return }
            if code == 101 {
                return finish(.failure(HTTPExchangeError(.malformedResponse, "\(server) switched protocols, which was not asked for")))
            }
            if let length = received.headers.first(name: "Content-Length").flatMap(Int.init), length > limit {
                return finish(.failure(.tooManyBytes(limit)))
            }
            head = received
        case .body(var buffer):
            guard head != nil else { return }
            guard buffer.readableBytes <= limit - body.readableBytes else { return finish(.failure(.tooManyBytes(limit))) }
            body.writeBuffer(&buffer)
        case .end:
            guard let head else { return }
            let headers = head.headers.map { (name: $0.name, value: $0.value) }
            finish(.success(HTTPResponse(status: Int(head.status.code), headers: headers, body: Array(buffer: body))))
        }
    }

    func caught(_ error: any Error) {
        // A close without TLS close_notify: a framed body that is cut short is
        // still caught by the parser at the close. A body only the close ends
        // is whole only with close_notify: without it anyone on the path could
        // have cut it, so it is refused.
        if let tls = error as? NIOSSLError, tls == .uncleanShutdown {
            guard let head, Self.endsWithTheConnection(head) else { return }
            return finish(.failure(HTTPExchangeError(
                .tls, "TLS with \(server) ended without close_notify during a body only the close ends: it may have been cut short")))
        }
        finish(.failure(.during(error, with: server)))
    }

    /// A body with neither Content-Length nor chunked framing: the close ends it (RFC 9112 §6.3).
    static func endsWithTheConnection(_ head: HTTPResponseHead) -> Bool {
        let code = head.status.code
        if code == 204 || code == 304 { return false }
        let chunked = head.headers[canonicalForm: "Transfer-Encoding"].contains { $0.lowercased() == "chunked" }
        return !chunked && head.headers.first(name: "Content-Length") == nil
    }

    func closed() {
        let what = head == nil ? "without answering" : "before its answer was complete"
        finish(.failure(HTTPExchangeError(.closedEarly, "\(server) closed the connection \(what)")))
    }

    private func finish(_ result: Result<HTTPResponse, HTTPExchangeError>) {
        loop.preconditionInEventLoop()
        guard !finished else { return }
        finished = true
        timer?.cancel()
        channel?.close(promise: nil)
        switch result {
        case .success(let response): promise.succeed(response)
        case .failure(let error): promise.fail(error)
        }
    }
}

/// Hands the connection's events to its exchange; a Happy Eyeballs attempt
/// that lost the race has handlers too, and is ignored.
final class ResponseReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    let exchange: Exchange

    init(_ exchange: Exchange) {
        self.exchange = exchange
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard exchange.owns(context.channel) else { return }
        exchange.received(unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard exchange.owns(context.channel) else { return }
        exchange.caught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if exchange.owns(context.channel) { exchange.closed() }
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if exchange.owns(context.channel), let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            exchange.handshakeCompleted()
        }
        context.fireUserInboundEventTriggered(event)
    }
}

extension RequestTarget {
    /// An address literal, which SNI may not carry.
    var isIPLiteral: Bool { (try? SocketAddress(ipAddress: host, port: 0)) != nil }
}
