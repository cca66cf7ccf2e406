import NIOCore

/// What an upstream connection tells the request it serves.
protocol UpstreamUser: AnyObject {
    func upstreamActive()
    func upstreamReceived(_ part: ResponsePart)
    func upstreamReadComplete()
    func upstreamWritabilityChanged(writable: Bool)
    func upstreamFailed(_ error: any Error)
}

/// The upstream's connections on one loop, kept open between requests
/// (HTTP/1.1 keep-alive). A client connection and the upstream connections
/// serving it share its loop, so a request never changes threads. Idle
/// connections are bounded for the upstream as a whole (`kept`, shared by the
/// loops: --keepalive) and each is closed after `idleTimeout` unused
/// (--keepalive-timeout); the most recently used is taken first, so the
/// oldest are the ones that time out.
final class UpstreamPool {
    let loop: ProxyLoop
    let dialer: Dialer
    /// Idle connections to the upstream, all loops together; more are closed when their request ends.
    let kept: Admission
    let idleTimeout: TimeAmount
    /// Oldest first, with when each became idle.
    private var idle: [(connection: UpstreamConnection, since: NIODeadline)] = []
    private var sweep: TimerHeap.ID?

    init(loop: ProxyLoop, dialer: Dialer, kept: Admission, idleTimeout: TimeAmount) {
        self.loop = loop
        self.dialer = dialer
        self.kept = kept
        self.idleTimeout = idleTimeout
    }

    /// Idle connections on this loop.
    var idleCount: Int { idle.count }

    /// A kept connection that is still open, if there is one.
    func idleConnection() -> UpstreamConnection? {
        while let (connection, _) = idle.popLast() {
            kept.leave()
            connection.pool = nil
            if connection.socket.isActive && !connection.closing && !connection.hasUnaskedBytes {
                connection.reused = true
                return connection
            }
            connection.close()
        }
        return nil
    }

    /// An idle connection closed (the upstream closed it): it is no longer counted.
    func forget(_ connection: UpstreamConnection) {
        guard let index = idle.firstIndex(where: { $0.connection === connection }) else { return }
        idle.remove(at: index)
        kept.leave()
    }

    /// Closes the connections idle for `idleTimeout`, and sets the timer for the next.
    private func sweepIdle() {
        sweep = nil
        let now = NIODeadline.now()
        while let first = idle.first, first.since + idleTimeout <= now {
            idle.removeFirst()
            kept.leave()
            first.connection.pool = nil
            first.connection.close()
        }
        scheduleSweep()
    }

    private func scheduleSweep() {
        guard sweep == nil, let first = idle.first else { return }
        sweep = loop.schedule(at: first.since + idleTimeout) { [weak self] in self?.sweepIdle() }
    }

    /// Every idle connection closed (the proxy is stopping).
    func closeIdle() {
        if let sweep { loop.cancel(sweep) }
        sweep = nil
        for (connection, _) in idle {
            kept.leave()
            connection.pool = nil
            connection.close()
        }
        idle = []
    }

    /// A new connection; `done` runs on the loop.
    func connect(_ done: @escaping (Result<UpstreamConnection, any Error>) -> Void) {
        dialer.connect(on: loop) { result in
            done(result.map { socket in UpstreamConnection(socket: socket) })
        }
    }

    /// A connection whose request is over: kept for the next one if it can serve it, else closed.
    func release(_ connection: UpstreamConnection, reusable: Bool) {
        connection.user = nil
        connection.resumeReading()
        // Bytes after the answer's end are none a request asked for: the connection cannot be trusted again.
        if reusable && !connection.hasUnaskedBytes && connection.socket.isActive && kept.admit() {
            connection.pool = self
            idle.append((connection, .now()))
            scheduleSweep()
        } else {
            connection.close()
        }
    }
}

/// One connection to the upstream: its answers go to the request it serves.
final class UpstreamConnection: SocketUser {
    let socket: Socket
    var user: UpstreamUser?
    /// It served a request before this one (a kept connection the upstream may have closed meanwhile).
    var reused = false
    /// Set while it is idle in this pool.
    weak var pool: UpstreamPool?
    private var decoder = ResponseDecoder()

    /// The proxy closed it.
    private(set) var closing = false

    func close() {
        closing = true
        socket.close(error: nil)
    }

    /// Bytes came that no answer has taken.
    var hasUnaskedBytes: Bool { decoder.hasBytes }

    init(socket: Socket) {
        self.socket = socket
        socket.user = self
    }

    func write(_ bytes: ByteBuffer) { socket.write(bytes) }

    /// A byte came since the request was written.
    private(set) var answerBegun = false

    /// The request written next is HEAD (its answer has no body) or not.
    func expectAnswer(toHead: Bool) {
        decoder.toHead = toHead
        answerBegun = false
    }

    func flush() { socket.flush() }

    func writeAndFlush(_ bytes: ByteBuffer) { socket.writeAndFlush(bytes) }

    /// The client does not take the answer as fast as it comes: the upstream's socket is not read meanwhile.
    func pauseReading() { socket.reading = false }

    func resumeReading() { socket.reading = true }

    func socketRead(_ bytes: ByteBuffer) {
        if let user {
            answerBegun = true
            user.upstreamActive()
        }
        decoder.append(bytes)
        // The user changes when an answer ends: its request is over, the connection pooled or closed.
        while let user {
            let part: ResponsePart?
            do {
                part = try decoder.next()
            } catch {
                self.user = nil
                close()
                user.upstreamFailed(error)
                return
            }
            guard let part else { return }
            user.upstreamReceived(part)
        }
        if decoder.hasBytes { close() }  // nothing asked for these
    }

    func socketReadComplete() {
        user?.upstreamReadComplete()
    }

    func socketWritabilityChanged() {
        user?.upstreamWritabilityChanged(writable: socket.isWritable)
    }

    func socketInputClosed() {}  // not asked for: an upstream that stops sending is closed

    func socketClosed(error: (any Error)?) {
        if let pool {
            self.pool = nil
            pool.forget(self)
        }
        // A body read until the connection closes ends here; any other answer is cut.
        if error == nil, let user, let end = decoder.closed() { return user.upstreamReceived(end) }
        let user = self.user
        self.user = nil
        user?.upstreamFailed(error ?? UpstreamError.closed)
    }
}
