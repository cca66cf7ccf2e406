// The floor for tokend-proxy in bench/proxy_floor.py (make bench-proxy-floor):
// the least a forwarding proxy written in Swift close to the system calls
// does per request, with no framework. Two threads, each with its own epoll
// and its own connections (a client and the one upstream connection kept for
// it); each accepts one connection per wakeup, as nginx does without
// multi_accept, and says on stderr which thread took it. A request head is
// read whole, an Authorization line is put before its empty line, and it goes
// upstream in one write; the answer's head and Content-Length body are read
// whole and go back in one write. GET only, no body, no chunked answers, no
// header checked, no timeouts, no backpressure, no TLS, no tokend; one message
// is taken per read (what a read brings after it waits for the next read).
//
//     swiftc -O -import-objc-header bench/proxy_floor.h bench/proxy_floor.swift -o proxy-floor
//     proxy-floor LISTEN_PORT UPSTREAM_PORT TOKEN
import Foundation  // Thread
import Glibc

/// What both threads share, set before they start.
struct Floor: Sendable {
    let listener: Int32
    let upstreamPort: UInt16
    /// The line put into every request head.
    let authorization: [UInt8]

    static func loopback(_ port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    static func check(_ result: Int32, _ what: String) {
        if result < 0 {
            perror(what)
            exit(1)
        }
    }

    /// The end of the head (just past its empty line) in `bytes`, if it is whole.
    static func headEnd(_ bytes: [UInt8]) -> Int? {
        bytes.withUnsafeBufferPointer { p in
            guard p.count >= 4 else { return nil }
            var at = 0
            while at < p.count {
                guard let found = memchr(p.baseAddress! + at, 0x0A, p.count - at) else { return nil }
                let lf = UnsafePointer<UInt8>(found.assumingMemoryBound(to: UInt8.self)) - p.baseAddress!
                if lf >= 3, p[lf - 1] == 0x0D, p[lf - 2] == 0x0A, p[lf - 3] == 0x0D { return lf + 1 }
                at = lf + 1
            }
            return nil
        }
    }

    /// Content-Length of a whole head (0 when it has none).
    static func contentLength(_ bytes: [UInt8], head: Int) -> Int {
        let name = Array("content-length:".utf8)
        var line = 0
        while line < head {
            var end = line
            while end < head, bytes[end] != 0x0A { end += 1 }
            if end - line > name.count, (0..<name.count).allSatisfy({ bytes[line + $0] | 0x20 == name[$0] | 0x20 }) {
                var value = 0
                for byte in bytes[(line + name.count)..<end] where byte >= 0x30 && byte <= 0x39 { value = value * 10 + Int(byte - 0x30) }
                return value
            }
            line = end + 1
        }
        return 0
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n > 0 {
                done += n
            } else if n < 0 && (errno == EAGAIN || errno == EINTR) {
                continue  // the messages here are small: a full socket buffer is rare enough to wait for in place
            } else {
                return false
            }
        }
        return true
    }

    func serve(thread: Int) {
        let epoll = epoll_create1(0)
        var event = epoll_event(events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue, data: epoll_data_t(fd: listener))
        Self.check(epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event), "epoll_ctl")
        var pairs: [Int32: Pair] = [:]
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        var one: Int32 = 1
        var outgoing: [UInt8] = []
        outgoing.reserveCapacity(4096)

        func close(_ pair: Pair) {
            pairs[pair.client] = nil
            pairs[pair.upstream] = nil
            Glibc.close(pair.client)
            Glibc.close(pair.upstream)
        }

        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), -1)
            guard count >= 0 else {
                if errno == EINTR { continue }
                perror("epoll_wait")
                exit(1)
            }
            for index in 0..<Int(count) {
                let fd = events[index].data.fd
                if fd == listener {
                    repeat {
                        let client = accept(listener, nil, nil)
                        if client < 0 { break }
                        fputs("accepted on thread \(thread)\n", stderr)
                        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
                        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                        var address = Self.loopback(upstreamPort)
                        let connected = withUnsafePointer(to: &address) {
                            connect(upstream, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), 16)
                        }
                        guard connected == 0 else {
                            Glibc.close(client)
                            Glibc.close(upstream)
                            continue
                        }
                        _ = fcntl(upstream, F_SETFL, fcntl(upstream, F_GETFL) | O_NONBLOCK)
                        setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, 4)
                        setsockopt(upstream, Int32(IPPROTO_TCP), TCP_NODELAY, &one, 4)
                        let pair = Pair(client: client, upstream: upstream)
                        pairs[client] = pair
                        pairs[upstream] = pair
                        for side in [client, upstream] {
                            var added = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: side))
                            epoll_ctl(epoll, EPOLL_CTL_ADD, side, &added)
                        }
                    } while false
                    continue
                }
                guard let pair = pairs[fd] else { continue }
                let n = read(fd, scratch.baseAddress!, scratch.count)
                guard n > 0 else {
                    if n < 0 && errno == EAGAIN { continue }
                    close(pair)
                    continue
                }
                let bytes = UnsafeRawBufferPointer(rebasing: scratch[0..<n])
                if fd == pair.client {
                    pair.request.append(contentsOf: bytes)
                    guard let end = Self.headEnd(pair.request) else { continue }
                    // The head without its empty line, the Authorization line, the empty line: one write.
                    outgoing.removeAll(keepingCapacity: true)
                    outgoing.append(contentsOf: pair.request[0..<(end - 2)])
                    outgoing.append(contentsOf: authorization)
                    outgoing.append(contentsOf: [0x0D, 0x0A])
                    pair.request.removeFirst(end)
                    if !outgoing.withUnsafeBytes({ Self.writeAll(pair.upstream, $0) }) { close(pair) }
                } else {
                    pair.answer.append(contentsOf: bytes)
                    guard let end = Self.headEnd(pair.answer) else { continue }
                    let whole = end + Self.contentLength(pair.answer, head: end)
                    guard pair.answer.count >= whole else { continue }
                    let ok = pair.answer.withUnsafeBytes { Self.writeAll(pair.client, UnsafeRawBufferPointer(rebasing: $0[0..<whole])) }
                    pair.answer.removeFirst(whole)
                    if !ok { close(pair) }
                }
            }
        }
    }
}

/// One client and the upstream connection kept for it, with the bytes each has sent that are not yet whole.
final class Pair {
    let client: Int32
    let upstream: Int32
    var request: [UInt8] = []
    var answer: [UInt8] = []
    init(client: Int32, upstream: Int32) {
        self.client = client
        self.upstream = upstream
        request.reserveCapacity(4096)
        answer.reserveCapacity(4096)
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let listenPort = UInt16(arguments[1]), let upstreamPort = UInt16(arguments[2]) else {
    fputs("usage: proxy-floor LISTEN_PORT UPSTREAM_PORT TOKEN\n", stderr)
    exit(2)
}
let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
var reuse: Int32 = 1
setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, 4)
var listenAddress = Floor.loopback(listenPort)
Floor.check(withUnsafePointer(to: &listenAddress) { bind(listener, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), 16) }, "bind")
Floor.check(listen(listener, 1024), "listen")
let floor = Floor(listener: listener, upstreamPort: upstreamPort, authorization: Array("Authorization: Bearer \(arguments[3])\r\n".utf8))
// Two threads, as tokend-proxy has two event loops (and nginx two workers).
Thread { floor.serve(thread: 2) }.start()
floor.serve(thread: 1)
