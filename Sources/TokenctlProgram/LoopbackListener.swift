#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPHead
import Loopback
import Persons

#if canImport(Glibc)
import Glibc
#endif

/// The redirect target of a browser login (RFC 8252 §7.3): an HTTP listener
/// on 127.0.0.1 at a port the system picks, or at the exact loopback address,
/// port and path a provider has registered, for the one request the browser
/// makes when the provider sends it back.
///
/// It serves only the user who began the login: loopback TCP carries no
/// credentials, so each connection's owner is asked of the kernel (Persons'
/// `PeerOwner`, as tokend-proxy's TCP listener asks) and any other uid gets
/// 403 (another local user could otherwise cancel the login, or complete it
/// with a code of its own). The authorization URL (state, nonce, code
/// challenge) never goes on a command line, where every user can read it:
/// the browser is sent to `startURL`, a path with a random name on this
/// listener, which redirects to it. Its requests are read by the project's
/// one head reader and held to its web-page rule: the Host must
/// name this listener, and a request from another site must be the browser's
/// own navigation (a page's fetch of the callback is refused).
final class LoopbackListener: @unchecked Sendable {
    let port: UInt16
    /// As written in URLs: "127.0.0.1" or "[::1]".
    let host: String
    /// Where the provider sends the browser back.
    let callbackPath: String
    /// What the callback URL starts with, as the redirect URI writes it (the provider compares it as text).
    let callbackOrigin: String
    let redirectURI: String
    /// The Host names this listener; another site's page may only navigate here.
    let pages: WebPageRule
    private let fd: Int32
    let startPath = "/start/" + (0..<16).map { _ in cFormat("%02x", UInt8.random(in: 0...255)) }.joined()

    /// `redirectURI`: the exact `http://127.0.0.1:PORT/PATH` or
    /// `http://[::1]:PORT/PATH` to listen at; nil: 127.0.0.1, a free port, /callback.
    init(redirectURI exact: String? = nil) throws {
        var address = LoopbackAddress.ipv4(port: 0)
        var path = "/callback"
        var origin: String?
        if let exact {
            guard let redirect = LoopbackRedirect(exact), let parsed = LoopbackAddress(host: redirect.host, port: redirect.port)
            else {
                throw ListenerError(
                    "\(exact) is not a loopback redirect URI: use http://127.0.0.1:PORT/PATH or http://[::1]:PORT/PATH, with no dot segment in its path",
                    exactAddress: true)
            }
            address = parsed
            path = redirect.path
            origin = redirect.origin
        }
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ListenerError("cannot create a socket: \(String(cString: strerror(errno)))", exactAddress: exact != nil) }
        var on: Int32 = 1
        if address.family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size)) }
        // The last login's connections to the same exact redirect URI may still be in TIME_WAIT.
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        guard address.bind(fd) == 0, listen(fd, 8) == 0 else {
            let problem = errno
            close(fd)
            if problem == EADDRINUSE, let exact {
                throw ListenerError(
                    "port \(address.port) of \(address.host) is in use, and the redirect URI \(exact) needs it: another login or another program holds it (`ss -ltnp 'sport = :\(address.port)'` names it)",
                    exactAddress: true)
            }
            throw ListenerError(
                "cannot listen on \(address.host): \(String(cString: strerror(problem)))", exactAddress: exact != nil)
        }
        self.fd = fd
        port = LoopbackAddress.of(fd, getsockname)?.port ?? address.port
        host = address.host
        callbackPath = path
        callbackOrigin = origin ?? "http://\(address.host):\(port)"
        redirectURI = exact ?? "http://127.0.0.1:\(port)/callback"
        pages = WebPageRule(listener: "tokenctl's login listener", ip: address.host, port: Int(port), allowsNavigations: true)
    }

    deinit { close(fd) }

    var startURL: String { "http://\(host):\(port)\(startPath)" }

    /// The next request for /callback from this user, with the connection to
    /// answer it on; `startPath` redirects to `authorizationURL`; other
    /// requests (a favicon) get 404. nil when `deadline` passes.
    func nextCallback(until deadline: Date, authorizationURL: String) async -> (url: String, connection: Int32)? {
        await withCheckedContinuation { continuation in
            detachThread {
                continuation.resume(returning: self.waitForCallback(until: deadline, authorizationURL: authorizationURL))
            }
        }
    }

    private func waitForCallback(until deadline: Date, authorizationURL: String) -> (url: String, connection: Int32)? {
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return nil }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, Int32(min(remaining, 1) * 1000)) > 0 else { continue }
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { continue }
            guard PeerOwner.uid(ofLoopbackPeer: connection) == getuid() else {
                Self.respond(
                    connection, status: "403 Forbidden", title: "Not yours",
                    message: "This login belongs to another user of this computer.")
                continue
            }
            let request: HTTPRequestHead
            switch Self.readRequest(connection, pages: pages) {
            case .success(let head):
                request = head
            case .failure(let refusal):
                Self.respond(connection, status: "\(refusal.status) \(refusal.reason)", title: "Refused", message: refusal.message)
                continue
            }
            guard request.syntax.method == .get else {
                Self.respond(connection, status: "405 Method Not Allowed", title: "Refused", message: "Only GET is answered here.")
                continue
            }
            let target = request.target
            if target == startPath {
                Self.redirect(connection, to: authorizationURL)
                continue
            }
            guard request.path == callbackPath else {
                Self.respond(connection, status: "404 Not Found", title: "Not found", message: "")
                continue
            }
            return (callbackOrigin + target, connection)
        }
    }

    /// What a request head may take: a browser's, with a provider's code and state in its target.
    static let limits = HeadLimits(bytes: 32 * 1024, fields: 100, line: 16 * 1024)

    /// The request's head, read within 5 s and `limits`, and not refused by `pages`.
    static func readRequest(_ connection: Int32, pages: WebPageRule) -> Result<HTTPRequestHead, HeadError> {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var scanner = HeadScanner(limits: limits)
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return .failure(HeadError(status: 400, message: "The request did not come whole.")) }
            data += buffer[0..<count]
            let found = data.withUnsafeBytes { p in
                Result { () throws(HeadError) -> HTTPRequestHead? in
                    guard let length = try scanner.headLength(p) else { return nil }
                    return try HTTPRequestHead(Array(p[..<length]), limits: limits)
                }
            }
            switch found {
            case .success(let head?):
                if let refusal = pages.refusal(for: head) { return .failure(HeadError(status: refusal.status, message: refusal.message)) }
                return .success(head)
            case .success(nil): continue
            case .failure(let error): return .failure(error)
            }
        }
    }

    /// Sends the browser on to `location`.
    static func redirect(_ connection: Int32, to location: String) {
        let response = "HTTP/1.1 302 Found\r\nLocation: \(location)\r\nContent-Length: 0\r\nCache-Control: no-store\r\n"
            + "Referrer-Policy: no-referrer\r\nConnection: close\r\n\r\n"
        let bytes = Array(response.utf8)
        _ = bytes.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
        close(connection)
    }

    /// A small page for the browser tab, then the connection is closed.
    static func respond(_ connection: Int32, status: String, title: String, message: String) {
        let escaped = Text.htmlEscaped
        let body = """
            <!doctype html><meta charset="utf-8"><title>tokend: \(escaped(title))</title>
            <body style="font-family:sans-serif;margin:3em"><h1 id="result">\(escaped(title))</h1>
            <p>\(escaped(message))</p></body>

            """
        let response = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Cache-Control: no-store\r\nConnection: close\r\n\r\n" + body
        let bytes = Array(response.utf8)
        _ = bytes.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
        close(connection)
    }
}

struct ListenerError: Error, CustomStringConvertible {
    let description: String
    /// The listener was to take the exact address of the session's redirect
    /// URI (the message says what is wrong with it), not a free port.
    let exactAddress: Bool
    init(_ description: String, exactAddress: Bool = false) {
        self.description = description
        self.exactAddress = exactAddress
    }
}

/// A loopback socket address a browser-login listener binds: IPv4 (127.0.0.0/8) or ::1.
enum LoopbackAddress {
    case ipv4(sockaddr_in)
    case ipv6(sockaddr_in6)

    static func ipv4(port: UInt16) -> LoopbackAddress {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return .ipv4(address)
    }

    /// `host` as URLComponents gives it ("127.0.0.1", "::1" or "[::1]"); nil unless a loopback literal.
    init?(host: String, port: UInt16) {
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard Loopback.isLiteral(name) else { return nil }
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, name, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            self = .ipv4(v4)
            return
        }
        var v6 = sockaddr_in6()
        guard inet_pton(AF_INET6, name, &v6.sin6_addr) == 1 else { return nil }
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = port.bigEndian
        self = .ipv6(v6)
    }

    var family: Int32 {
        switch self {
        case .ipv4: AF_INET
        case .ipv6: AF_INET6
        }
    }

    var port: UInt16 {
        switch self {
        case .ipv4(let a): UInt16(bigEndian: a.sin_port)
        case .ipv6(let a): UInt16(bigEndian: a.sin6_port)
        }
    }

    /// As written in a URL.
    var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let text = { String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        switch self {
        case .ipv4(var a):
            inet_ntop(AF_INET, &a.sin_addr, &buffer, socklen_t(buffer.count))
            return text()
        case .ipv6(var a):
            inet_ntop(AF_INET6, &a.sin6_addr, &buffer, socklen_t(buffer.count))
            return "[\(text())]"
        }
    }

    func bind(_ fd: Int32) -> Int32 {
        switch self {
        case .ipv4(var a):
            withUnsafePointer(to: &a) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .ipv6(var a):
            withUnsafePointer(to: &a) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
    }

    /// A socket's own (`getsockname`) or peer's (`getpeername`) address.
    static func of(
        _ fd: Int32, _ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) -> LoopbackAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
        }
        guard named == 0 else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET: return .ipv4(withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) })
        case AF_INET6: return .ipv6(withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) })
        default: return nil
        }
    }
}
