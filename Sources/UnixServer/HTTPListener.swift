import CLinux
@_exported import HTTPHead

#if canImport(Glibc)
import Glibc
#endif

/// A loopback TCP listener the server's loop serves beside the Unix socket:
/// one GET per connection, answered on the loop by `answer` (which must not
/// block) and closed. For metrics a scraper reads; no second server stack.
public struct HTTPListener: Sendable {
    /// An IP literal (127.0.0.1, ::1) and a port.
    public var host: String
    public var port: Int
    public var answer: @Sendable (HTTPRequestHead) -> HTTPAnswer

    public init(host: String, port: Int, answer: @escaping @Sendable (HTTPRequestHead) -> HTTPAnswer) {
        self.host = host
        self.port = port
        self.answer = answer
    }

    /// What a request head may take: a scraper's is a few lines. Past these it is answered 431 (414 for
    /// its request line) and closed.
    static let limits = HeadLimits(bytes: 8 * 1024, fields: 64, line: 8 * 1024)
    /// Connections served at once. When all are taken, the oldest one still
    /// sending its head is closed for the newcomer: a scraper sends its
    /// request at once, so idle holders cannot keep it out.
    static let maximumConnections = 16
    /// A request head must be whole this soon after accept (or the frame timeout, if shorter).
    static let headTimeout: Int64 = 2_000_000_000

    /// `host:port` as a URL names it.
    public var authority: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// A bound, listening, non-blocking TCP socket.
    func listen() throws -> CInt {
        let family = host.contains(":") ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SocketSetupError(path: authority, operation: "socket", errno: errno) }
        func failure(_ operation: String, _ code: Int32 = errno) -> SocketSetupError {
            close(fd)
            return SocketSetupError(path: authority, operation: operation, errno: code)
        }
        var on: CInt = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<CInt>.size))
        let bound: CInt
        if family == AF_INET6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else { throw failure("bind", EINVAL) }
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw failure("bind", EINVAL) }
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard bound == 0 else { throw failure("bind") }
        guard Glibc.listen(fd, 64) == 0 else { throw failure("listen") }
        return fd
    }
}

/// What the loop writes back before it closes the connection.
public struct HTTPAnswer: Sendable {
    public var status: Int
    public var reason: String
    public var contentType: String
    public var body: String

    public init(status: Int, reason: String, contentType: String = "text/plain; charset=utf-8", body: String) {
        self.status = status
        self.reason = reason
        self.contentType = contentType
        self.body = body
    }

    /// A refusal with its status's reason phrase.
    public init(status: Int, body: String) {
        self.init(status: status, reason: ReasonPhrase.of(status), body: body)
    }

    var bytes: [UInt8] {
        let body = Array(self.body.utf8)
        let head =
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\n"
            + "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// One HTTP connection while the loop serves it. Loop thread only.
final class HTTPConnection {
    let fd: CInt
    let accepted: Int64
    var head: [UInt8] = []
    var scanner = HeadScanner(limits: HTTPListener.limits)
    var reply: [UInt8] = []
    var written = 0
    var lastProgress: Int64

    init(fd: CInt, now: Int64) {
        self.fd = fd
        self.accepted = now
        self.lastProgress = now
    }
}

extension ServerLoop {
    func acceptHTTP() {
        guard let listener = httpListener else { return }
        for _ in 0..<64 {
            let fd = accept4(listener, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            guard fd >= 0 else {
                if errno == ECONNABORTED || errno == EPROTO { continue }
                return
            }
            if httpConnections.count >= HTTPListener.maximumConnections, let oldest = oldestReadingHead() {
                metrics?.evictedHTTP.increment()
                httpClose(oldest)
            }
            guard httpConnections.count < HTTPListener.maximumConnections,
                watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
            else {
                Glibc.close(fd)
                continue
            }
            httpConnections[fd] = HTTPConnection(fd: fd, now: now)
        }
    }

    /// The connection accepted first among those whose answer is not yet made.
    func oldestReadingHead() -> HTTPConnection? {
        httpConnections.values.filter { $0.reply.isEmpty }.min { $0.accepted < $1.accepted }
    }

    func httpReady(_ connection: HTTPConnection, flags: UInt32) {
        if !connection.reply.isEmpty { return httpFlush(connection) }
        let count = read(connection.fd, input.baseAddress, input.count)
        if count < 0, errno == EAGAIN || errno == EINTR { return }
        guard count > 0 else { return httpClose(connection) }
        connection.head.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[0..<count]))
        let found = connection.head.withUnsafeBytes { p in
            Result { () throws(HeadError) -> HTTPRequestHead? in
                guard let length = try connection.scanner.headLength(p) else { return nil }
                return try HTTPRequestHead(Array(p[..<length]), limits: HTTPListener.limits)
            }
        }
        let request: HTTPRequestHead
        switch found {
        case .success(let head?): request = head
        case .success(nil): return
        case .failure(let error): return httpRespond(connection, HTTPAnswer(status: error.status, body: error.message + "\n"))
        }
        guard let answer = http?.answer else { return httpRespond(connection, HTTPAnswer(status: 404, body: "nothing is served here\n")) }
        httpRespond(connection, answer(request))
    }

    func httpRespond(_ connection: HTTPConnection, _ answer: HTTPAnswer) {
        metrics?.answeredHTTP(answer.status)
        connection.head = []
        connection.reply = answer.bytes
        connection.lastProgress = now
        _ = watch(connection.fd, events: EPOLLOUT.rawValue, operation: EPOLL_CTL_MOD)
        httpFlush(connection)
    }

    func httpFlush(_ connection: HTTPConnection) {
        while connection.written < connection.reply.count {
            let sent = connection.reply.withUnsafeBytes {
                Glibc.send(connection.fd, $0.baseAddress! + connection.written, $0.count - connection.written, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                if errno == EAGAIN || errno == EINTR { return }
                return httpClose(connection)
            }
            connection.written += sent
            connection.lastProgress = now
        }
        httpClose(connection)
    }

    func httpClose(_ connection: HTTPConnection) {
        guard httpConnections.removeValue(forKey: connection.fd) != nil else { return }
        Glibc.close(connection.fd)
    }

    /// A head not whole within the head timeout, or an answer the socket
    /// takes nothing of for the write timeout, closes the connection.
    func checkHTTP() {
        for connection in Array(httpConnections.values) {
            let limit = connection.reply.isEmpty
                ? min(limits.frameTimeout.nanoseconds, HTTPListener.headTimeout) : limits.writeTimeout.nanoseconds
            let since = connection.reply.isEmpty ? connection.accepted : connection.lastProgress
            if now - since > limit {
                if connection.reply.isEmpty { metrics?.answeredHTTP(408) }
                httpClose(connection)
            }
        }
    }
}
