import CLinux
import Logging
import NIOCore
import Synchronization
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// A connection the front loop passes to the SwiftNIO server, where it stays.
struct HandedOff: Sendable {
    let fd: CInt
    let peer: PeerCredentials?
    /// Counted against the connection limit (NIO releases it on close);
    /// false: over the limit, to be answered with the overload error.
    let admitted: Bool
    /// Read and not answered: the first frame the front could not answer and everything after it.
    let unread: [UInt8]
    /// Replies to earlier calls not yet written; they go out first.
    let unwritten: [UInt8]
}

/// The server's accepting end, and the fast path's own thread.
///
/// One thread with epoll owns the listening socket. It accepts (up to 256
/// connections per wake-up), reads each connection's calls and answers those
/// the fast path answers at once (a cached token) with one write per read:
/// a cached call costs here about what a bare C epoll server costs, with no
/// SwiftNIO pipeline, promise or task in between.
///
/// The first frame it cannot answer (another method, a token that needs a
/// refresh, a malformed or oversized message) hands the connection to the
/// SwiftNIO server together with the bytes read and not answered and the
/// replies not yet written, so replies stay in order. A connection over the
/// limit is handed over at once to be refused there; without a fast path every
/// connection is. The server's limits hold here too: frame, idle and write
/// timeouts, and a client that does not read stops being read.
final class FrontLoop: @unchecked Sendable {
    private let listener: CInt
    private let limits: VarlinkServer.Limits
    private let fastPath: VarlinkServer.FastPath?
    private let open: ConnectionCount
    private let logger: Logger
    private let handOff: @Sendable (HandedOff) -> Void
    private let ended: @Sendable () -> Void
    private let epoll: CInt
    private let wake: CInt
    private let stopping = Atomic(false)

    // Everything below belongs to the loop's thread.
    private var connections: [CInt: FrontConnection] = [:]
    private let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// Replies made during one read, written with one call.
    private var output: [UInt8] = []
    private var now: Int64 = 0
    private var lastCheck: Int64 = 0
    private var acceptPausedUntil: Int64?

    init(
        listener: CInt, limits: VarlinkServer.Limits, fastPath: VarlinkServer.FastPath?, open: ConnectionCount,
        logger: Logger, handOff: @escaping @Sendable (HandedOff) -> Void, ended: @escaping @Sendable () -> Void
    ) throws {
        self.ended = ended
        self.listener = listener
        self.limits = limits
        self.fastPath = fastPath
        self.open = open
        self.logger = logger
        self.handOff = handOff
        let flags = fcntl(listener, F_GETFL)
        guard flags >= 0, fcntl(listener, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw SocketSetupError(path: "listening socket", operation: "fcntl", errno: errno)
        }
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        wake = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard epoll >= 0, wake >= 0 else {
            throw SocketSetupError(path: "listening socket", operation: "epoll", errno: errno)
        }
        guard watch(listener, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD),
            watch(wake, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
        else { throw SocketSetupError(path: "listening socket", operation: "epoll_ctl", errno: errno) }
        output.reserveCapacity(64 * 1024)
    }

    /// Runs the loop on a thread of its own until `stop()`.
    func start() {
        var thread = pthread_t()
        let started = pthread_create(
            &thread, nil,
            { argument in
                let loop = Unmanaged<FrontLoop>.fromOpaque(argument!).takeRetainedValue()
                loop.run()
                return nil
            }, Unmanaged.passRetained(self).toOpaque())
        precondition(started == 0, "cannot start the server's thread: \(String(cString: strerror(started)))")
        pthread_detach(thread)
    }

    /// Ends the loop: it closes the listening socket and the connections it
    /// still holds, then calls `ended` (which it also does if epoll fails).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 1024)
        let interval = limits.checkInterval.nanoseconds
        loop: while true {
            let timeout = Int32(interval / 1_000_000)
            let ready = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 1024, timeout) }
            if ready < 0, errno != EINTR {
                logger.critical("server loop failed", metadata: ["error": "\(String(cString: strerror(errno)))"])
                break
            }
            now = Self.monotonicNow()
            var accepting = false
            for index in 0..<max(0, Int(ready)) {
                let fd = events[index].data.fd
                if fd == wake { break loop }
                if fd == listener {
                    accepting = true
                } else if let connection = connections[fd] {
                    service(connection, flags: events[index].events)
                }
            }
            // After the batch: a descriptor closed above and reused by accept
            // must not receive the rest of the batch's events for the old one.
            if accepting { acceptAll() }
            if now - lastCheck >= interval {
                lastCheck = now
                check()
            }
        }
        for connection in Array(connections.values) { close(connection) }
        Glibc.close(listener)
        Glibc.close(epoll)
        Glibc.close(wake)
        input.deallocate()
        ended()
    }

    private func service(_ connection: FrontConnection, flags: UInt32) {
        if flags & EPOLLOUT.rawValue != 0 {
            flush(connection)
            guard connections[connection.fd] != nil else { return }
        }
        if flags & EPOLLIN.rawValue != 0 {
            readable(connection)
        } else if flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            close(connection)
        }
    }

    // MARK: Accepting

    private func acceptAll() {
        for _ in 0..<256 {
            let fd = accept4(listener, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            guard fd >= 0 else {
                switch errno {
                case EAGAIN, EINTR: return
                case ECONNABORTED, EPROTO: continue
                default:
                    // Out of descriptors or memory: stop accepting for a moment
                    // rather than spin on a listener that stays readable.
                    logger.warning(
                        "cannot accept connections", metadata: ["error": "\(String(cString: strerror(errno)))"])
                    _ = watch(listener, events: 0, operation: EPOLL_CTL_DEL)
                    acceptPausedUntil = now + 100_000_000
                    return
                }
            }
            let peer = Self.peerCredentials(fd)
            let admitted = open.admit(limit: limits.maximumConnections)
            guard admitted, fastPath != nil else {
                handOff(HandedOff(fd: fd, peer: peer, admitted: admitted, unread: [], unwritten: []))
                continue
            }
            let connection = FrontConnection(fd: fd, peer: peer, now: now)
            guard watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) else {
                Glibc.close(fd)
                open.release()
                continue
            }
            connections[fd] = connection
        }
    }

    static func peerCredentials(_ fd: CInt) -> PeerCredentials? {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid)
    }

    // MARK: Reading and answering

    private func readable(_ connection: FrontConnection) {
        let count = read(connection.fd, input.baseAddress, input.count)
        if count <= 0 {
            if count < 0, errno == EAGAIN || errno == EINTR { return }
            return close(connection)  // end of stream or a reset
        }
        connection.lastRead = now
        let bytes = UnsafeRawBufferPointer(rebasing: input[0..<count])
        output.removeAll(keepingCapacity: true)
        var start = 0
        while let found = memchr(bytes.baseAddress! + start, 0, count - start) {
            let end = bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
            let answered: Bool
            if connection.partial.isEmpty {
                answered = answer(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), on: connection)
            } else {
                connection.partial.append(contentsOf: bytes[start..<end])
                answered = connection.partial.withUnsafeBytes { answer($0, on: connection) }
                if answered { connection.partial = [] }
            }
            guard answered else {
                var unread = connection.partial.isEmpty ? [] : connection.partial
                unread.append(contentsOf: bytes[(unread.isEmpty ? start : end)..<count])
                return pass(connection, unread: unread)
            }
            start = end + 1
        }
        if start < count {
            connection.partial.append(contentsOf: bytes[start..<count])
            if connection.partial.count > limits.maximumFrameLength {
                // NIO's frame decoder answers "too large" and closes.
                return pass(connection, unread: connection.partial)
            }
        }
        send(connection)
    }

    /// Appends the fast path's reply to `output`; false if it cannot answer.
    private func answer(_ frame: UnsafeRawBufferPointer, on connection: FrontConnection) -> Bool {
        guard let fastPath, frame.count > 0 else { return false }
        let call: VarlinkCall
        if let last = connection.lastCall, connection.lastFrame.count == frame.count,
            connection.lastFrame.withUnsafeBytes({ memcmp($0.baseAddress!, frame.baseAddress!, frame.count) == 0 })
        {
            call = last  // most clients ask the same way every time: parsed once
        } else {
            guard let parsed = try? VarlinkCall(frame: frame) else { return false }
            call = parsed
            connection.lastFrame = Array(frame)
            connection.lastCall = parsed
        }
        guard let reply = fastPath(call, connection.peer) else { return false }
        reply.withUnsafeReadableBytes { output.append(contentsOf: $0) }
        return true
    }

    // MARK: Writing

    private func send(_ connection: FrontConnection) {
        guard !output.isEmpty else { return }
        guard connection.unwritten.isEmpty else {
            connection.unwritten.append(contentsOf: output)
            return updateInterest(connection)
        }
        let written = output.withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if written == output.count { return }
        if written < 0, errno != EAGAIN, errno != EINTR { return close(connection) }
        connection.unwritten = Array(output[max(0, written)...])
        connection.unwritableSince = now
        updateInterest(connection)
    }

    private func flush(_ connection: FrontConnection) {
        guard !connection.unwritten.isEmpty else { return updateInterest(connection) }
        let written = connection.unwritten.withUnsafeBytes {
            Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        if written < 0 {
            if errno == EAGAIN || errno == EINTR { return }
            return close(connection)
        }
        connection.unwritten.removeFirst(written)
        if connection.unwritten.isEmpty { connection.unwritableSince = nil }
        updateInterest(connection)
    }

    /// Reads while the replies waiting to be written stay under the high
    /// watermark; asks to be told when the socket is writable while any wait.
    private func updateInterest(_ connection: FrontConnection) {
        var wanted: UInt32 = 0
        if connection.unwritten.count < limits.writeBufferHighWatermark { wanted |= EPOLLIN.rawValue }
        if !connection.unwritten.isEmpty { wanted |= EPOLLOUT.rawValue }
        guard wanted != connection.interest else { return }
        connection.interest = wanted
        if !watch(connection.fd, events: wanted, operation: EPOLL_CTL_MOD) { close(connection) }
    }

    // MARK: Ending

    private func pass(_ connection: FrontConnection, unread: [UInt8]) {
        _ = watch(connection.fd, events: 0, operation: EPOLL_CTL_DEL)
        connections[connection.fd] = nil
        var unwritten = connection.unwritten
        unwritten.append(contentsOf: output)
        output.removeAll(keepingCapacity: true)
        handOff(
            HandedOff(fd: connection.fd, peer: connection.peer, admitted: true, unread: unread, unwritten: unwritten))
    }

    private func close(_ connection: FrontConnection) {
        connections[connection.fd] = nil
        Glibc.close(connection.fd)
        open.release()
    }

    /// Closes connections that hold resources without using them, as
    /// ConnectionGuard does for connections on the NIO side.
    private func check() {
        if let until = acceptPausedUntil, now >= until {
            acceptPausedUntil = nil
            _ = watch(listener, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
        }
        let frameTimeout = limits.frameTimeout.nanoseconds
        let writeTimeout = limits.writeTimeout.nanoseconds
        let idleTimeout = limits.idleTimeout.nanoseconds
        for connection in Array(connections.values) {
            var reason: String?
            if !connection.partial.isEmpty, now - connection.lastRead > frameTimeout {
                reason = "incomplete message for \(frameTimeout / 1_000_000_000) s"
            } else if let since = connection.unwritableSince, now - since > writeTimeout {
                reason = "replies not read for \(writeTimeout / 1_000_000_000) s"
            } else if connection.partial.isEmpty, connection.unwritten.isEmpty, now - connection.lastRead > idleTimeout {
                reason = "idle for \(idleTimeout / 1_000_000_000) s"
            }
            guard let reason else { continue }
            logger.notice("closing connection", metadata: ["reason": "\(reason)"])
            close(connection)
        }
    }

    private func watch(_ fd: CInt, events: UInt32, operation: Int32) -> Bool {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        return epoll_ctl(epoll, operation, fd, &event) == 0
    }

    static func monotonicNow() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}

/// A connection while the front loop serves it. Loop thread only.
final class FrontConnection {
    let fd: CInt
    let peer: PeerCredentials?
    var lastRead: Int64
    /// The start of a message whose end has not arrived.
    var partial: [UInt8] = []
    var unwritten: [UInt8] = []
    var unwritableSince: Int64?
    /// The epoll events asked for.
    var interest = EPOLLIN.rawValue
    /// The last frame parsed, and its call.
    var lastFrame: [UInt8] = []
    var lastCall: VarlinkCall?

    init(fd: CInt, peer: PeerCredentials?, now: Int64) {
        self.fd = fd
        self.peer = peer
        self.lastRead = now
    }
}
