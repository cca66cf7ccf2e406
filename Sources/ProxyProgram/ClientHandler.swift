import Logging
import NIOCore
import NIOHTTP1

/// What every connection shares: the options, tokend's answers, the body budget.
struct Settings: Sendable {
    let upstream: Upstream
    let credentials: Credentials
    let bodyBudget: BodyBudget
    let bufferLimit: Int
    let bodyTimeout: TimeAmount
    let headerTimeout: TimeAmount
    let timeout: TimeAmount
    /// How long an event stream may stay silent between events (--stream-idle-timeout).
    let streamIdleTimeout: TimeAmount
    let maxConnections: Int
    let maxConnectionsPerUser: Int
    /// Who may use the proxy on TCP.
    let peers: PeerRule
    /// Idle upstream connections kept, all loops together (--keepalive), and for how long (--keepalive-timeout).
    let keptUpstream: Admission
    let keepaliveTimeout: TimeAmount
    let pages: WebPages
    let logger: Logger
}

/// One client connection, on its loop: its requests one after another
/// (HTTP/1.1 keep-alive), each forwarded on a kept upstream connection of the
/// same loop. A request that comes while one is answered (pipelined) waits,
/// and the socket is not read meanwhile; the socket is read on while an
/// answer is under way otherwise, so that serving a request changes no epoll
/// registration.
///
/// Deadlines: the next request's head must be whole within --header-timeout
/// of the connection's start or of the previous answer (408 after); while the
/// proxy waits for the next part of a body, it must come within
/// --body-timeout (408, closed). Time the proxy spends elsewhere (asking
/// tokend, waiting for the upstream to take a chunk) is not the client's.
/// The upstream must take request bytes within --timeout of the last it took
/// (504, both connections closed), start answering within --timeout of the
/// request's end, and may not fall silent for longer (504, or the connection
/// closed once the answer has begun).
final class ClientHandler: SocketUser {
    enum Phase {
        /// Waiting for a request head.
        case idle
        /// Reading a request's body to drop it; then the answer (and the connection closed, with `close`).
        case skipping(Answer, close: Bool)
        case exchange(Exchange)
        /// Over the cap, or closing: nothing more is read or answered.
        case done
    }

    let settings: Settings
    let pool: UpstreamPool
    let socket: Socket
    /// The peer may be served (on a Unix socket: it is this process's user).
    let allowed: Bool
    /// Counted until the connection closes; not admitted, it gets 503.
    let admission: Admission
    let admitted: Bool
    var phase = Phase.idle
    let alarm: Alarm
    var headDeadline: NIODeadline?
    var bodyDeadline: NIODeadline?
    var upstreamDeadline: NIODeadline?
    /// Request bytes wait for the upstream to take them: it must take some by then.
    var sendDeadline: NIODeadline?
    /// The proxy takes no more of the client's body for now (its upstream is not there or not taking it).
    var paused = false
    /// The client's bytes as requests; what came while one is answered (pipelined) waits in it.
    var decoder = RequestDecoder()
    /// The answer's head and the body pieces after it, gathered to go to the client in one write.
    var outgoing: ByteBuffer?
    /// Bytes were written to the client since its last flush.
    var unflushed = false
    /// The lines tokend's last answers made (`credentialLines(for:)`).
    var keptCredentialLines: (authorization: String, cookies: String, lines: ByteBuffer)?
    /// `drain` is under way.
    var draining = false
    /// Set while `drain` waits for the client to take the proxy's own answers: it must take one by then.
    var blockedDeadline: NIODeadline?
    /// The connection closes by then, whether or not the client took the last answer.
    var closeDeadline: NIODeadline?
    /// The client shut its sending side: the connection closes once what it sent is answered.
    var inputClosed = false
    /// The proxy is stopping: the connection closes after the answer under way.
    var stopping = false
    /// Told when the connection has closed (its loop's list of connections lets go of it).
    var onClosed: (() -> Void)?

    /// On TCP, who the peer's socket belongs to (its slots are counted apart); nil on a Unix socket.
    let owner: UInt32?

    init(settings: Settings, pool: UpstreamPool, socket: Socket, allowed: Bool, admission: Admission, owner: UInt32? = nil) {
        self.settings = settings
        self.pool = pool
        self.socket = socket
        self.allowed = allowed
        self.admission = admission
        self.owner = owner
        admitted = admission.admit(owner: owner)
        alarm = Alarm(on: pool.loop)
        alarm.check = { [unowned self] in self.checkDeadlines() }
    }

    /// The connection is accepted: over the cap it gets 503, else its first request head is awaited.
    func start() {
        guard admitted else {
            phase = .done
            if let owner, admission.isFull(owner: owner) {
                settings.logger.warning(
                    "refused a connection over its user's cap", metadata: ["uid": "\(owner)", "max-connections-per-user": "\(settings.maxConnectionsPerUser)"])
                return writeThenClose(
                    Answer(status: .serviceUnavailable, message: "the proxy serves \(settings.maxConnectionsPerUser) connections per user at most; try again")
                        .bytes(version: .http1_1, close: true))
            }
            settings.logger.warning("refused a connection over the cap", metadata: ["max-connections": "\(settings.maxConnections)"])
            return writeThenClose(
                Answer(status: .serviceUnavailable, message: "the proxy serves \(settings.maxConnections) connections at most; try again")
                    .bytes(version: .http1_1, close: true))
        }
        let deadline = NIODeadline.now() + settings.headerTimeout
        headDeadline = deadline
        alarm.ensure(deadline)
    }

    /// Closed: by the proxy, by the client, or after a socket error.
    func socketClosed(error: (any Error)?) {
        if case .exchange(let exchange) = phase { abandon(exchange) }
        phase = .done
        alarm.retire()
        if admitted { admission.leave(owner: owner) }
        onClosed?()
        onClosed = nil
    }

    /// The proxy is stopping: a connection between requests closes now; one with an exchange under
    /// way closes once its answer is written, and that answer says so.
    func stop() {
        stopping = true
        switch phase {
        case .idle where !decoder.hasBytes && !socket.isWaitingForRoom:
            phase = .done
            socket.close(error: nil)
        case .exchange(let exchange):
            exchange.closeAfter = true
        default:
            break  // a refusal being written or read past: `answered` closes it
        }
    }

    /// A request the proxy cannot read: its status and why, and the connection closed (where the
    /// request ends is not known); an answer already under way is cut.
    func refuse(_ error: WireError) {
        settings.logger.warning("refused a malformed request", metadata: ["reason": "\(error.message)"])
        if case .exchange(let exchange) = phase {
            abandon(exchange)
            if exchange.relayedHead {
                phase = .done
                return socket.close(error: nil)
            }
            lastVersion = exchange.head.version
        }
        phase = .done
        write(Answer(status: error.status, message: error.message), version: nil, close: true)
    }

    func socketRead(_ bytes: ByteBuffer) {
        if case .done = phase {
            pause()  // nothing more is answered: its bytes are dropped and no more are read
            return
        }
        decoder.append(bytes)
        drain()
    }

    func socketReadComplete() {}

    /// The requests read are handled one after another while none is being answered and the client
    /// takes what is written to it; the socket is read on only then, and the rest waits in the decoder.
    /// An answer given within the loop (a refusal) calls `answered`, which comes back here: the loop
    /// under way takes the next request, so that requests in a row nest no calls.
    func drain() {
        guard !draining else { return }
        draining = true
        defer { draining = false }
        var blocked = false
        while !answering {
            switch phase {
            case .done:
                return
            case .idle, .skipping:
                // The proxy's own answers come from here: none while the client does not take them.
                blocked = !socket.isWritable
            case .exchange:
                blocked = false  // an exchange goes at the pace of its upstream and its client, as they say
            }
            if blocked { break }
            let part: RequestPart?
            do {
                part = try decoder.next()
            } catch {
                return refuse(error)
            }
            guard let part else { break }
            handle(part)
        }
        if blocked {
            // Nothing more is read until the client takes what was written, and it has --timeout to.
            pause()
            let deadline = NIODeadline.now() + settings.timeout
            blockedDeadline = deadline
            alarm.ensure(deadline)
            return
        }
        blockedDeadline = nil
        switch phase {
        case .done:
            break
        case .idle where inputClosed:  // the client sent no more than a cut head after its last request
            phase = .done
            socket.close(error: nil)
        case .idle, .skipping:
            resume()
        case .exchange(let exchange) where exchange.bodyDone:
            if decoder.hasBytes { pause() }  // pipelined: taken when this answer is over
        case .exchange(let exchange) where !exchange.streaming:
            resume()
        default:
            break  // streaming at the pace its upstream sets
        }
    }

    /// The request's body is whole and its answer is under way.
    var answering: Bool {
        if case .exchange(let exchange) = phase { exchange.bodyDone } else { false }
    }

    /// The client shut its sending side.
    func socketInputClosed() {
        inputClosed = true
        switch phase {
        case .idle where blockedDeadline == nil:  // nothing whole is left unanswered (`drain` took it): what is left is a cut head
            phase = .done
            writeThenClose(ByteBuffer())  // after what was written
        case .exchange(let exchange) where !exchange.bodyDone:
            abandon(exchange)  // the client went away before its request was whole
            phase = .done
            socket.close(error: nil)
        case .skipping where blockedDeadline == nil:
            phase = .done
            writeThenClose(ByteBuffer())
        default:
            break
        }
    }

    func handle(_ part: RequestPart) {
        switch (phase, part) {
        case (.idle, .head(let head)):
            begin(head)
        case (.skipping(let answer, let close), .end):
            bodyDeadline = nil
            if close {
                phase = .done
                write(answer, version: nil, close: true)
            } else {
                phase = .idle
                write(answer, version: nil, close: false)
                answered()
            }
        case (.skipping, .body):
            waitForBody()
        case (.exchange(let exchange), .body(let chunk)):
            receive(chunk, for: exchange)
        case (.exchange(let exchange), .end):
            exchange.bodyEnded()
            bodyDeadline = nil
            if !exchange.streaming {
                obtainCredentials(for: exchange)
            } else if let upstream = exchange.upstream {
                if exchange.upstreamChunked { upstream.write(Wire.lastChunk) }
                upstream.flush()
                exchange.markSent()
                awaitUpstream()
                watchSending()
            }
        case (.done, _):
            break
        default:
            // A part without a head: what the decoder never delivers.
            phase = .done
            socket.close(error: nil)
        }
    }

    /// A request head: refused, or an exchange whose body is read next.
    private func begin(_ head: RequestHead) {
        headDeadline = nil
        answersInJSONRPC = head.speaksMCP
        if !allowed {
            settings.logger.warning("refused another user's request", metadata: ["uid": "\(owner.map { $0 == .max ? "unknown" : "\($0)" } ?? "?")"])
        }
        if let refusal = allowed ? settings.pages.refusal(for: head) : .forbidden {
            if allowed { settings.logger.warning("refused a request", metadata: ["reason": "\(refusal.message)"]) }
            lastVersion = head.version
            phase = .skipping(refusal, close: true)
            return waitForBody()
        }
        switch RequestPath.normalized(head.target) {
        case .success(let target):
            let path = target.prefix { $0 != "?" }
            phase = .exchange(Exchange(head: head, upstream: settings.upstream, target: target, path: path))
            // The proxy reads the body itself: a client that waits to be asked for it is asked.
            if head.expectsContinue, head.chunked || head.contentLength ?? 0 > 0 {
                socket.writeAndFlush(Wire.continueAnswer)
            }
        case .failure(let refusal):
            settings.logger.warning("refused a request path", metadata: ["reason": "\(refusal.why)"])
            lastVersion = head.version
            phase = .skipping(.badRequest(refusal.why), close: !head.keepAlive)
        }
        waitForBody()
    }

    /// The version of the request being answered with a refusal.
    var lastVersion = HTTPVersion.http1_1
    /// The request being answered speaks MCP: the proxy's own answers to it are JSON-RPC errors.
    var answersInJSONRPC = false

    /// A chunk of the body: kept while it fits, else streamed to the upstream.
    private func receive(_ chunk: ByteBuffer, for exchange: Exchange) {
        waitForBody()
        if !exchange.streaming {
            let size = chunk.readableBytes
            if exchange.kept.readableBytes + size <= settings.bufferLimit, settings.bodyBudget.take(size) {
                exchange.budgeted += size
                exchange.kept.writeImmutableBuffer(chunk)
                return
            }
            exchange.outgrew()
            exchange.pending.append(chunk)
            return obtainCredentials(for: exchange)
        }
        if let upstream = exchange.upstream {
            exchange.writeBody(chunk, to: upstream)
            upstream.flush()
            if !upstream.socket.isWritable { pause() }
            watchSending()
        } else {
            exchange.pending.append(chunk)
            pause()
        }
    }
}
