import Dispatch
import NIOCore
import NIOSSL

#if canImport(Glibc)
import Glibc
#endif

/// Connections to the upstream, made on a loop: the name is looked up off
/// the loop (a literal needs no look-up), and its addresses are tried in
/// the order given, the next one 250 ms after the one before unless that
/// failed sooner (RFC 8305's connection attempt delay: an address that drops
/// connects costs a quarter second, not the whole timeout). The first to
/// connect is used; all of it, the look-up too, within `timeout`. An https
/// upstream's TLS starts at once.
struct Dialer: Sendable {
    let host: String
    let port: Int
    let tls: NIOSSLContext?
    let timeout: TimeAmount

    static let attemptDelay = TimeAmount.milliseconds(250)

    /// The name TLS checks the certificate against (none for an address literal).
    var serverHostname: String? { host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host }

    /// A connected socket on `loop`, with no user yet; `done` runs on the loop.
    func connect(on loop: ProxyLoop, _ done: @escaping (Result<Socket, any Error>) -> Void) {
        let dialing = Dialing(dialer: self, loop: loop, done: done)
        if let literal = Self.resolve(host, port: port, numeric: true) {
            return dialing.resolved(literal)
        }
        let (host, port) = (self.host, self.port)
        let back = LoopBound(dialing, on: loop)
        DispatchQueue.global().async {
            let addresses = Self.resolve(host, port: port, numeric: false) ?? []
            loop.execute { back.value.resolved(addresses) }
        }
    }

    /// The same, to addresses already known.
    func connect(to addresses: [Address], on loop: ProxyLoop, _ done: @escaping (Result<Socket, any Error>) -> Void) {
        Dialing(dialer: self, loop: loop, done: done).resolved(addresses)
    }

    /// A socket whose connect to `address` is under way (or done: on loopback it may be at once).
    fileprivate func open(_ address: Address, on loop: ProxyLoop) -> Result<Socket, any Error> {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(SocketError("socket", errno)) }
        var one: CInt = 1
        setsockopt(fd, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
        let result = withUnsafeBytes(of: address.storage) { Glibc.connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), address.length) }
        guard result == 0 || errno == EINPROGRESS else {
            let code = errno
            Glibc.close(fd)
            return .failure(SocketError("connect", code))
        }
        var filter: TLSFilter?
        do {
            filter = try tls.map { try TLSFilter(context: $0, serverHostname: serverHostname, peer: address.socketAddress) }
            let socket = Socket(fd: fd, on: loop, halfClosure: false, tls: filter)
            try loop.register(socket)
            return .success(socket)
        } catch {
            filter?.dispose()
            Glibc.close(fd)
            return .failure(error)
        }
    }

    /// An address getaddrinfo gave.
    struct Address: Sendable {
        var storage = sockaddr_storage()
        var length: socklen_t
        var family: CInt

        /// NIO's spelling of it (what TLS checks a certificate's IP addresses against).
        var socketAddress: SocketAddress {
            withUnsafeBytes(of: storage) { raw in
                family == AF_INET6
                    ? SocketAddress(raw.load(as: sockaddr_in6.self), host: "") : SocketAddress(raw.load(as: sockaddr_in.self), host: "")
            }
        }
    }

    static func resolve(_ host: String, port: Int, numeric: Bool) -> [Address]? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = numeric ? AI_NUMERICHOST : AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(first) }
        var addresses: [Address] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let entry = next {
            var address = Address(length: entry.pointee.ai_addrlen, family: entry.pointee.ai_family)
            withUnsafeMutableBytes(of: &address.storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: entry.pointee.ai_addr, count: Int(entry.pointee.ai_addrlen))) }
            addresses.append(address)
            next = entry.pointee.ai_next
        }
        return addresses
    }
}

/// One connect under way: its addresses, the attempts started, the deadline.
private final class Dialing {
    let dialer: Dialer
    let loop: ProxyLoop
    private var done: ((Result<Socket, any Error>) -> Void)?
    /// Not tried yet.
    private var addresses: [Dialer.Address] = []
    private var attempts: [Connecting] = []
    private var deadline: TimerHeap.ID?
    private var nextAttempt: TimerHeap.ID?
    private var lastError: (any Error)?

    init(dialer: Dialer, loop: ProxyLoop, done: @escaping (Result<Socket, any Error>) -> Void) {
        self.dialer = dialer
        self.loop = loop
        self.done = done
        // Time is up while an attempt (or the look-up) is under way: that is the upstream's slowness, whatever
        // an earlier address said.
        deadline = loop.schedule(at: .now() + dialer.timeout) { [self] in finish(.failure(UpstreamError.connectTimedOut)) }
    }

    func resolved(_ addresses: [Dialer.Address]) {
        guard done != nil else { return }  // the deadline came first
        guard !addresses.isEmpty else { return finish(.failure(UpstreamError.unresolved(dialer.host))) }
        self.addresses = addresses
        startNext()
    }

    private func startNext() {
        if let nextAttempt { loop.cancel(nextAttempt) }
        nextAttempt = nil
        guard done != nil else { return }
        guard !addresses.isEmpty else {
            if attempts.isEmpty { finish(.failure(lastError ?? SocketError("connect", ETIMEDOUT))) }
            return
        }
        switch dialer.open(addresses.removeFirst(), on: loop) {
        case .failure(let error):
            lastError = error
            startNext()
        case .success(let socket):
            let attempt = Connecting(socket: socket)
            attempt.ended = { [unowned self, unowned attempt] result in ended(attempt, result) }
            attempts.append(attempt)
            if !addresses.isEmpty { nextAttempt = loop.schedule(at: .now() + Dialer.attemptDelay) { [self] in startNext() } }
        }
    }

    private func ended(_ attempt: Connecting, _ result: Result<Socket, any Error>) {
        attempts.removeAll { $0 === attempt }
        switch result {
        case .success: finish(result)
        case .failure(let error):
            lastError = error
            startNext()  // at once: the one that failed has no more time to take
        }
    }

    private func finish(_ result: Result<Socket, any Error>) {
        guard let done else { return }
        self.done = nil
        for timer in [deadline, nextAttempt].compactMap({ $0 }) { loop.cancel(timer) }
        for attempt in attempts { attempt.abandon() }
        attempts = []
        done(result)
        if case .success(let socket) = result { socket.readPending() }  // what came with the connect
    }
}

/// A socket whose connect is under way: its first readiness says how it went.
private final class Connecting: SocketUser {
    let socket: Socket
    var ended: ((Result<Socket, any Error>) -> Void)?

    init(socket: Socket) {
        self.socket = socket
        socket.user = self
        socket.onConnected = { [unowned self] in connected() }
    }

    private func connected() {
        withExtendedLifetime(self) { report() }  // the attempt ends here, and its last owner may let go of it
    }

    private func report() {
        var code: CInt = 0
        var size = socklen_t(MemoryLayout<CInt>.size)
        getsockopt(socket.fd, SOL_SOCKET, SO_ERROR, &code, &size)
        if code == 0 {
            socket.user = nil
            socket.onConnected = nil
            socket.flush()  // the TLS handshake's first message
            if !socket.isActive { return end(.failure(SocketError("write", EPIPE))) }
            return end(.success(socket))
        }
        end(.failure(SocketError("connect", code)))
    }

    /// Another attempt won, or the time is up.
    func abandon() {
        ended = nil
        socketEnded()
    }

    private func end(_ result: Result<Socket, any Error>) {
        let ended = self.ended
        if case .failure = result { socketEnded() }
        self.ended = nil
        ended?(result)
    }

    /// The socket, not wanted, is closed (without telling this user again).
    private func socketEnded() {
        socket.user = nil
        socket.onConnected = nil
        socket.close(error: nil)
    }

    func socketRead(_ bytes: ByteBuffer) {}
    func socketReadComplete() {}
    func socketWritabilityChanged() {}
    func socketInputClosed() {}
    func socketClosed(error: (any Error)?) { end(.failure(error ?? SocketError("connect", ECONNRESET))) }
}
