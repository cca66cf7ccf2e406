import CLinux
import Foundation
import Logging
import Loopback
import NIOCore
import NIOSSL

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
    let logger: Logger
    /// Connections being served: at most `maxConnections`, so that memory is bounded in total.
    let admission: Admission

    init(
        upstream: Upstream, session: String?, resource: String? = nil, scope: String? = nil, tokendSocket: String?, bufferLimit: Int, bodyBudget: Int,
        bodyTimeout: Duration, headerTimeout: Duration, maxConnections: Int, timeout: Duration, logger: Logger
    ) {
        self.upstream = upstream
        credentials = Credentials(session: session, resource: resource, scope: scope, socket: tokendSocket, logger: logger)
        self.bufferLimit = bufferLimit
        self.bodyBudget = BodyBudget(limit: bodyBudget)
        self.bodyTimeout = bodyTimeout
        self.headerTimeout = headerTimeout
        self.maxConnections = maxConnections
        admission = Admission(limit: maxConnections)
        self.timeout = timeout
        self.logger = logger
    }

    /// Serves until the listener closes; tokend's events are followed meanwhile.
    func run(on address: ListenAddress) async throws {
        let following = Task { await credentials.follow() }
        defer { following.cancel() }
        try await listen(on: address)
    }

    private func listen(on address: ListenAddress) async throws {
        // A peer gone while a write is under way is a write error on that connection, not the end of the process.
        signal(SIGPIPE, SIG_IGN)
        let listener = try Listener.open(address)
        // A socket systemd passed may be bound to any address; only a loopback one keeps other hosts out.
        if let local = listener.local, let ip = local.ipAddress, !Loopback.isLiteral(ip) {
            close(listener.fd)
            throw ListenRefused(address: local.protocol == .inet6 ? "[\(ip)]:\(local.port ?? 0)" : "\(ip):\(local.port ?? 0)")
        }
        if listener.local != nil {
            logger.warning("listening on TCP: any local user can use this proxy, and so the session's token")
        }
        let nanoseconds = { (duration: Duration) in TimeAmount.nanoseconds(Int64(duration.components.seconds) * 1_000_000_000) }
        let settings = Settings(
            upstream: upstream, credentials: credentials, bodyBudget: bodyBudget, bufferLimit: bufferLimit,
            bodyTimeout: nanoseconds(bodyTimeout), headerTimeout: nanoseconds(headerTimeout), timeout: nanoseconds(timeout),
            maxConnections: maxConnections, pages: WebPages(listeningOn: listener.local), logger: logger)
        // A redirect would carry the token elsewhere: the client gets it as it is (the proxy follows none).
        let tls = try upstream.tls ? NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        let dialer = Dialer(host: upstream.host, port: upstream.port, tls: tls, timeout: .seconds(10))
        for loop in try ProxyLoop.start(count: System.coreCount) {
            let accepting = LoopBound(Accepting(listener: listener, settings: settings, admission: admission, dialer: dialer, loop: loop), on: loop)
            loop.execute { accepting.value.start() }
        }
        logger.notice(
            "listening",
            metadata: ["address": "\(listener.local.map { "\($0)" } ?? "\(address)")", "upstream": "\(upstream.base)\(upstream.prefix)"])
        while true { try await Task.sleep(for: .seconds(3600)) }
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

    init(listener: Listener, settings: Settings, admission: Admission, dialer: Dialer, loop: ProxyLoop) {
        self.listener = listener
        self.settings = settings
        self.admission = admission
        self.loop = loop
        pool = UpstreamPool(loop: loop, dialer: dialer, keep: settings.maxConnections)
    }

    func start() {
        do {
            try loop.watch(listener: listener.fd) { [self] in acceptOne() }
        } catch {
            fatalError("tokend-proxy: cannot watch the listening socket: \(error)")
        }
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
        let allowed = settings.pages.hosts != nil || Listener.peerIsThisUser(fd)
        let handler = ClientHandler(settings: settings, pool: pool, socket: socket, allowed: allowed, admission: admission)
        socket.user = handler
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
