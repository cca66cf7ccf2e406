import Foundation  // DispatchQueue
import NIOCore
import NIOSSL

#if canImport(Glibc)
import Glibc
#endif

/// Connections to the upstream, made on a loop: the name is looked up off
/// the loop (a literal needs no look-up), and its addresses are tried in
/// turn, all within `timeout` of the start; an https upstream's TLS starts at
/// once.
struct Dialer: Sendable {
    let host: String
    let port: Int
    let tls: NIOSSLContext?
    let timeout: TimeAmount

    /// The name TLS checks the certificate against (none for an address literal).
    var serverHostname: String? { host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host }

    /// A connected socket on `loop`, with no user yet; `done` runs on the loop.
    func connect(on loop: ProxyLoop, _ done: @escaping (Result<Socket, any Error>) -> Void) {
        let deadline = NIODeadline.now() + timeout
        if let literal = Self.resolve(host, port: port, numeric: true) {
            return attempt(literal, deadline: deadline, on: loop, done)
        }
        let (host, port) = (self.host, self.port)
        let back = LoopBound(done, on: loop)
        DispatchQueue.global().async {
            let addresses = Self.resolve(host, port: port, numeric: false) ?? []
            loop.execute { attempt(addresses, deadline: deadline, on: loop, back.value) }
        }
    }

    private func attempt(
        _ addresses: [Address], deadline: NIODeadline, on loop: ProxyLoop, _ done: @escaping (Result<Socket, any Error>) -> Void
    ) {
        guard let address = addresses.first else {
            return done(.failure(UpstreamUnresolved(host: host)))
        }
        guard deadline > .now() else { return done(.failure(SocketError("connect", ETIMEDOUT))) }
        let rest = Array(addresses.dropFirst())
        start(address, deadline: deadline, on: loop) { result in
            if case .failure = result, !rest.isEmpty { return attempt(rest, deadline: deadline, on: loop, done) }
            done(result)
        }
    }

    private func start(
        _ address: Address, deadline: NIODeadline, on loop: ProxyLoop, _ done: @escaping (Result<Socket, any Error>) -> Void
    ) {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return done(.failure(SocketError("socket", errno))) }
        var one: CInt = 1
        setsockopt(fd, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
        let result = withUnsafeBytes(of: address.storage) { Glibc.connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), address.length) }
        guard result == 0 || errno == EINPROGRESS else {
            let code = errno
            Glibc.close(fd)
            return done(.failure(SocketError("connect", code)))
        }
        let socket: Socket
        do {
            let filter = try tls.map { try TLSFilter(context: $0, serverHostname: serverHostname, peer: address.socketAddress) }
            socket = Socket(fd: fd, on: loop, halfClosure: false, tls: filter)
            try loop.register(socket)
        } catch {
            Glibc.close(fd)
            return done(.failure(error))
        }
        let waiting = Connecting(socket: socket, done: done)
        socket.user = waiting
        socket.onConnected = { waiting.connected() }  // held until `finish` drops it
        waiting.timer = loop.schedule(at: deadline) { waiting.finish(SocketError("connect", ETIMEDOUT)) }
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

/// A socket whose connect is under way: the first readiness for writing says how it went.
private final class Connecting: SocketUser {
    let socket: Socket
    var done: ((Result<Socket, any Error>) -> Void)?
    var timer: TimerHeap.ID?

    init(socket: Socket, done: @escaping (Result<Socket, any Error>) -> Void) {
        self.socket = socket
        self.done = done
    }

    func connected() {
        var code: CInt = 0
        var size = socklen_t(MemoryLayout<CInt>.size)
        getsockopt(socket.fd, SOL_SOCKET, SO_ERROR, &code, &size)
        finish(code == 0 ? nil : SocketError("connect", code))
    }

    func finish(_ error: SocketError?) {
        guard let done else { return }
        self.done = nil
        socket.onConnected = nil
        if let timer { socket.loop.cancel(timer) }
        socket.user = nil
        if let error {
            socket.close(error: nil)
            return done(.failure(error))
        }
        socket.flush()  // the TLS handshake's first message
        done(.success(socket))
        socket.readPending()  // what came with the connect (an upstream that closes at once)
    }

    func socketRead(_ bytes: ByteBuffer) {}
    func socketReadComplete() {}
    func socketWritabilityChanged() {}
    func socketInputClosed() {}
    func socketClosed(error: (any Error)?) { finish(error.map { $0 as? SocketError ?? SocketError("connect", ECONNABORTED) } ?? SocketError("connect", ECONNRESET)) }
}

/// The upstream's name has no address.
struct UpstreamUnresolved: Error, CustomStringConvertible {
    let host: String
    var description: String { "the upstream's name \(host) has no address" }
}
