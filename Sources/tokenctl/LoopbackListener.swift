import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The redirect target of a browser login (RFC 8252 §7.3): an HTTP listener
/// on 127.0.0.1 at a port the system picks, for the one request the browser
/// makes when the provider sends it back.
///
/// It serves only the user who began the login: loopback TCP carries no
/// credentials, so each connection's owner is looked up in /proc/net/tcp and
/// any other uid gets 403 (another local user could otherwise cancel the
/// login, or complete it with a code of its own). The authorization URL
/// (state, nonce, code challenge) never goes on a command line, where every
/// user can read it: the browser is sent to `startURL`, a path with a random
/// name on this listener, which redirects to it.
final class LoopbackListener: @unchecked Sendable {
    let port: UInt16
    private let fd: Int32
    let startPath = "/start/" + (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ListenerError("cannot create a socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            close(fd)
            throw ListenerError("cannot listen on 127.0.0.1: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(fd) }

    var redirectURI: String { "http://127.0.0.1:\(port)/callback" }
    var startURL: String { "http://127.0.0.1:\(port)\(startPath)" }

    /// The next request for /callback from this user, with the connection to
    /// answer it on; `startPath` redirects to `authorizationURL`; other
    /// requests (a favicon) get 404. nil when `deadline` passes.
    func nextCallback(until deadline: Date, authorizationURL: String) async -> (url: String, connection: Int32)? {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
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
            guard Self.ownerUID(of: connection) == getuid() else {
                Self.respond(
                    connection, status: "403 Forbidden", title: "Not yours",
                    message: "This login belongs to another user of this computer.")
                continue
            }
            guard let target = Self.readRequestTarget(connection) else {
                Self.respond(connection, status: "400 Bad Request", title: "Bad request", message: "")
                continue
            }
            if target == startPath {
                Self.redirect(connection, to: authorizationURL)
                continue
            }
            guard target.hasPrefix("/callback") else {
                Self.respond(connection, status: "404 Not Found", title: "Not found", message: "")
                continue
            }
            return ("http://127.0.0.1:\(port)\(target)", connection)
        }
    }

    /// The target of a GET request line, read within 5 s and 16 KiB.
    static func readRequestTarget(_ connection: Int32) -> String? {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while data.count < 16384 {
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return nil }
            data += buffer[0..<count]
            if let end = data.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: data[..<end.lowerBound], as: UTF8.self)
                let words = head.split(separator: "\r\n").first?.split(separator: " ") ?? []
                guard words.count == 3, words[0] == "GET" else { return nil }
                return String(words[1])
            }
        }
        return nil
    }

    /// The uid owning the other end of an accepted loopback TCP connection:
    /// its socket is the entry of /proc/net/tcp (or, for an IPv6 socket
    /// speaking to 127.0.0.1, /proc/net/tcp6) whose local address is our peer
    /// and whose remote address is us. nil if not found.
    static func ownerUID(of connection: Int32) -> uid_t? {
        var peer = sockaddr_in()
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(connection, $0, &length) }
        }
        length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ours = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(connection, $0, &length) }
        }
        guard named == 0, ours == 0 else { return nil }
        // The kernel prints an address as its 32-bit words in memory and the port in host order;
        // an IPv4 address seen by an IPv6 socket is ::ffff:a.b.c.d.
        let format = { (address: sockaddr_in, prefix: String) in
            prefix + String(format: "%08X:%04X", address.sin_addr.s_addr, UInt16(bigEndian: address.sin_port))
        }
        for (path, prefix) in [("/proc/net/tcp", ""), ("/proc/net/tcp6", "0000000000000000FFFF0000")] {
            // Read to the end: procfs reports a size of 0, which Foundation's file readers trust.
            guard let file = FileHandle(forReadingAtPath: path), let data = try? file.readToEnd() else { continue }
            let table = String(decoding: data, as: UTF8.self)
            if let uid = ownerUID(in: table, local: format(peer, prefix), remote: format(local, prefix)) { return uid }
        }
        return nil
    }

    /// The uid of the socket in a /proc/net/tcp or tcp6 `table` with these
    /// addresses, counting only a connected socket that a process still holds:
    /// ESTABLISHED (state 01) with an inode. A socket its owner has closed
    /// (FIN_WAIT2, TIME_WAIT) is listed with uid 0 and inode 0, so a request
    /// another user sends and closes at once would otherwise pass as root's.
    static func ownerUID(in table: String, local: String, remote: String) -> uid_t? {
        for line in table.split(separator: "\n").dropFirst() {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let fields = line.split(separator: " ")
            guard fields.count > 9, fields[1] == local, fields[2] == remote, fields[3] == "01", fields[9] != "0",
                let uid = uid_t(fields[7])
            else { continue }
            return uid
        }
        return nil
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
        let escaped = { (text: String) in
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;")
        }
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
    init(_ description: String) { self.description = description }
}
