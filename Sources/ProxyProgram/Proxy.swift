import CLinux
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Loopback
import NIOCore
import NIOSSL
import Persons

#if canImport(Glibc)
import Glibc
#endif

/// The listener and, on each loop (one per core), the client connections it
/// accepts and the upstream connections that serve them; tokend's answers
/// come from `Credentials`.
final class Proxy: Sendable {
    let upstream: Upstream
    let credentials: Credentials
    let bufferLimit: Int
    let bodyBudget: BodyBudget
    let bodyTimeout: Duration
    let headerTimeout: Duration
    let maxConnections: Int
    let timeout: Duration
    /// How long an event stream may stay silent (--stream-idle-timeout).
    let streamIdleTimeout: Duration
    let logger: Logger
    /// Connections being served: at most `maxConnections`, so that memory is bounded in total.
    let admission: Admission
    /// Idle upstream connections kept (all loops together), and for how long.
    let keepalive: Int
    let keepaliveTimeout: Duration
    let maxConnectionsPerUser: Int
    /// How long in-flight exchanges have to finish once SIGTERM or SIGINT came.
    let stopTimeout: Duration
    /// Who may use the proxy on TCP (--peers, and whose the session is).
    let peers: PeerRule

    init(
        upstream: Upstream, session: String?, resource: String? = nil, scope: String? = nil, tokendSocket: String?, bufferLimit: Int, bodyBudget: Int,
        bodyTimeout: Duration, headerTimeout: Duration, maxConnections: Int, timeout: Duration,
        streamIdleTimeout: Duration = .seconds(300), peers: PeerRule.Setting? = nil, keepalive: Int = 64,
        keepaliveTimeout: Duration = .seconds(60), stopTimeout: Duration = .seconds(10), passCookies: Bool = false,
        maxConnectionsPerUser: Int? = nil, logger: Logger
    ) {
        self.maxConnectionsPerUser = maxConnectionsPerUser ?? maxConnections
        self.upstream = upstream
        credentials = Credentials(
            session: session, resource: resource, scope: scope, socket: tokendSocket, passCookies: passCookies,
            tokendTimeout: timeout, logger: logger)
        self.keepalive = keepalive
        self.keepaliveTimeout = keepaliveTimeout
        self.stopTimeout = stopTimeout
        self.bufferLimit = bufferLimit
        self.bodyBudget = BodyBudget(limit: bodyBudget)
        self.bodyTimeout = bodyTimeout
        self.headerTimeout = headerTimeout
        self.maxConnections = maxConnections
        // Who is whom on TCP: read once, at start (a range added later counts after a restart).
        let persons = SubordinateIDs.load()
        for problem in persons.problems {
            logger.warning("subordinate uid table", metadata: ["problem": "\(problem)"])
        }
        admission = Admission(
            limit: maxConnections, perOwner: maxConnectionsPerUser ?? maxConnections, persons: persons, own: getuid())
        self.peers = PeerRule(setting: peers, persons: persons, own: getuid(), logger: logger)
        self.timeout = timeout
        self.streamIdleTimeout = streamIdleTimeout
        self.logger = logger
    }

    /// Serves until SIGTERM or SIGINT, then stops (`stop`); tokend's events are followed meanwhile.
    func run(on address: ListenAddress) async throws {
        // Whose the session is, before the first connection is accepted (until tokend says, only this
        // user's programs are served on TCP); the event stream asks again each time it begins.
        if let kind = await credentials.sessionKind() { peers.learn(kind) }
        let following = Task { [peers] in await credentials.follow { peers.learn($0) } }
        defer { following.cancel() }
        let (signals, sources) = Self.stopSignals()
        let (listener, accepting) = try listen(on: address)
        for await signal in signals {
            logger.notice("stopping", metadata: ["signal": "\(signal == SIGTERM ? "SIGTERM" : "SIGINT")"])
            break
        }
        sources.forEach { $0.cancel() }
        await stop(accepting, listener: listener, address: address)
    }

    /// SIGTERM and SIGINT, as they come (their default action, the end of the process, is turned off).
    private static func stopSignals() -> (AsyncStream<CInt>, [any DispatchSourceSignal]) {
        let (stream, continuation) = AsyncStream<CInt>.makeStream()
        let sources = [SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        return (stream, sources)
    }

    /// No more connections are accepted; idle ones close, and exchanges under way have --stop-timeout
    /// to finish (their connections close after their answer). A socket file the proxy made is removed;
    /// one systemd passed is systemd's.
    private func stop(_ accepting: [LoopBound<Accepting>], listener: Listener, address: ListenAddress) async {
        let stopped = Admission(limit: accepting.count)  // counts the loops that stopped accepting
        for each in accepting {
            each.loop.execute {
                each.value.stop()
                _ = stopped.admit()
            }
        }
        while stopped.count < accepting.count { try? await Task.sleep(for: .milliseconds(5)) }
        // No loop watches it now: a client that comes next is refused at once, rather than left in the backlog.
        close(listener.fd)
        if case .unix(let path, _) = address, listener.isStillBound(at: path) { unlink(path) }
        let deadline = ContinuousClock.now + stopTimeout
        while admission.count > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        if admission.count > 0 {
            logger.warning("stopped with exchanges under way", metadata: ["connections": "\(admission.count)", "stop-timeout": "\(stopTimeout)"])
        }
        logger.notice("stopped")
    }

    /// The listener, watched by one loop per core.
    private func listen(on address: ListenAddress) throws -> (Listener, [LoopBound<Accepting>]) {
        // A peer gone while a write is under way is a write error on that connection, not the end of the process.
        signal(SIGPIPE, SIG_IGN)
        let listener = try Listener.open(address)
        // A socket systemd passed may be bound to any address; only a loopback one keeps other hosts out.
        if let local = listener.local, let ip = local.ipAddress, !Loopback.isLiteral(ip) {
            close(listener.fd)
            throw ListenRefused(address: local.protocol == .inet6 ? "[\(ip)]:\(local.port ?? 0)" : "\(ip):\(local.port ?? 0)")
        }
        if listener.local != nil, peers.setting != .own {
            logger.warning(
                "listening on TCP: unless the session is a user's (served to its owner only), any local user can use this proxy, and so the session's token (--peers own serves this user only)")
        }
        let nanoseconds = { (duration: Duration) in TimeAmount.nanoseconds(Int64(duration.components.seconds) * 1_000_000_000) }
        let settings = Settings(
            upstream: upstream, credentials: credentials, bodyBudget: bodyBudget, bufferLimit: bufferLimit,
            bodyTimeout: nanoseconds(bodyTimeout), headerTimeout: nanoseconds(headerTimeout), timeout: nanoseconds(timeout),
            streamIdleTimeout: nanoseconds(streamIdleTimeout),
            maxConnections: maxConnections, maxConnectionsPerUser: maxConnectionsPerUser, peers: peers, keptUpstream: Admission(limit: keepalive), keepaliveTimeout: nanoseconds(keepaliveTimeout),
            pages: WebPages(listeningOn: listener.local), logger: logger)
        // A redirect would carry the token elsewhere: the client gets it as it is (the proxy follows none).
        let tls = try upstream.tls ? NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        let dialer = Dialer(host: upstream.host, port: upstream.port, tls: tls, timeout: nanoseconds(timeout))
        var all: [LoopBound<Accepting>] = []
        for loop in try ProxyLoop.start(count: System.coreCount) {
            let accepting = LoopBound(Accepting(listener: listener, settings: settings, admission: admission, dialer: dialer, loop: loop), on: loop)
            loop.execute { accepting.value.start() }
            all.append(accepting)
        }
        logger.notice(
            "listening",
            metadata: ["address": "\(listener.local.map { "\($0)" } ?? "\(address)")", "upstream": "\(upstream.base)\(upstream.prefix)"])
        return (listener, all)
    }
}

/// One loop's accepting: each connection the kernel hands this loop becomes a ClientHandler served
/// here, with the upstream connections of this loop's pool.
final class Accepting {
    let listener: Listener
    let settings: Settings
    let admission: Admission
    let loop: ProxyLoop
    let pool: UpstreamPool
    /// On TCP: who owns each connection's peer (nil if the kernel's socket diagnostics cannot be asked).
    private lazy var owners = PeerOwner()
    /// The connections this loop serves, so that a stop reaches them.
    private var handlers: [ObjectIdentifier: ClientHandler] = [:]

    init(listener: Listener, settings: Settings, admission: Admission, dialer: Dialer, loop: ProxyLoop) {
        self.listener = listener
        self.settings = settings
        self.admission = admission
        self.loop = loop
        pool = UpstreamPool(loop: loop, dialer: dialer, kept: settings.keptUpstream, idleTimeout: settings.keepaliveTimeout)
    }

    func start() {
        do {
            try loop.watch(listener: listener.fd) { [self] in acceptOne() }
        } catch {
            fatalError("tokend-proxy: cannot watch the listening socket: \(error)")
        }
    }

    /// No more connections: idle ones close now, the others after the answer under way.
    func stop() {
        loop.stopped = true
        loop.unwatch(listener: listener.fd)
        for handler in Array(handlers.values) { handler.stop() }
        pool.closeIdle()
    }

    /// One connection per wakeup, so that the loops share them.
    private func acceptOne() {
        let fd = accept4(listener.fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
        guard fd >= 0 else {
            switch errno {
            case EAGAIN, EINTR, ECONNABORTED, EPERM, EPROTO, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH:
                return  // another loop took it, or it went away (accept(2): errors of the connection, not the listener)
            default:
                // Out of descriptors or memory: the listener rests for a moment rather than spinning.
                settings.logger.error("accept failed", metadata: ["problem": "\(SocketError("accept4", errno))"])
                loop.pause(listener: listener.fd, for: .milliseconds(100))
                return
            }
        }
        if listener.local != nil {
            var one: CInt = 1
            setsockopt(fd, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
        }
        let socket = Socket(fd: fd, on: loop, halfClosure: true)
        do {
            try loop.register(socket)
        } catch {
            close(fd)
            return
        }
        // On TCP every local user may connect: each person has its own share of the slots (one the kernel
        // cannot name shares the nobody-known share), and is served as `peers` says (a session a user added:
        // its owner only). On a Unix socket only this user is served; another user a --mode lets connect is
        // refused, and until then holds no more than a person's share.
        let onTCP = listener.local != nil
        let peer = onTCP ? owners?.uid(ofPeerOf: fd) : nil
        let allowed = onTCP ? settings.peers.admits(owner: peer) : Listener.peerIsThisUser(fd)
        let owner = onTCP ? (peer ?? .max) : (allowed ? nil : (Listener.peerUID(fd) ?? .max))
        let handler = ClientHandler(settings: settings, pool: pool, socket: socket, allowed: allowed, admission: admission, owner: owner)
        socket.user = handler
        let key = ObjectIdentifier(handler)
        handlers[key] = handler
        handler.onClosed = { [unowned self] in handlers[key] = nil }
        handler.start()
    }
}

/// A passed socket bound to an address other hosts can reach.
struct ListenRefused: Error {
    let address: String
}

extension ListenAddress: CustomStringConvertible {
    var description: String {
        switch self {
        case .unix(let path, _): "unix:\(path)"
        case .tcp(let host, let port): "tcp:\(host):\(port)"
        case .inherited(let fd): "fd \(fd) (socket activation)"
        }
    }
}
