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
    /// Read and not answered: the first frame the front could not take and everything after it.
    let unread: [UInt8]
    /// Replies to earlier calls not yet written; they go out first.
    let unwritten: [UInt8]
}

/// The server's accepting end and its plain calls, on a thread of its own.
///
/// One thread with epoll owns the listening socket. It accepts (up to 256
/// connections per wake-up) and reads each connection's calls:
/// - a call the fast path answers at once (a cached token) is answered right
///   there, one write per read: such a call costs about what a bare C epoll
///   server costs, with no SwiftNIO pipeline, promise or task in between;
/// - any other call without `more` goes to the service in a task; its reply
///   comes back to the loop, which writes it. The connection's later calls
///   wait (it is not read) until then, so replies stay in order;
/// - a `more` or `upgrade` call, a malformed or an oversized message hands
///   the connection to the SwiftNIO server with the bytes read and not
///   answered and the replies not yet written; it stays there.
/// A connection over the limit is handed over at once, to be refused there.
/// The server's limits hold here too: frame, idle and write timeouts, and a
/// client that does not read stops being read.
final class FrontLoop: @unchecked Sendable {
    let listener: CInt
    let limits: VarlinkServer.Limits
    let fastPath: VarlinkServer.FastPath?
    let service: VarlinkService
    let open: ConnectionCount
    let logger: Logger
    let handOff: @Sendable (HandedOff) -> Void
    let ended: @Sendable () -> Void
    let epoll: CInt
    /// Written once by `stop()`.
    let wake: CInt
    /// Written when `finished` gains its first entry.
    let mail: CInt
    let stopping = Atomic(false)
    /// Replies of calls the service finished, for the loop to write.
    let finished = Mutex(Mailbox())

    struct Mailbox {
        var items: [(fd: CInt, connection: UInt64, replies: [UInt8])] = []
        /// Health checks waiting for the loop to come round.
        var pings: [CheckedContinuation<Void, Never>] = []
        /// False once the loop has ended: nothing more is delivered.
        var open = true
        /// Test hook: the loop stops for good when it reads this.
        var hang = false

        var isEmpty: Bool { items.isEmpty && pings.isEmpty && !hang }
    }

    // Everything below belongs to the loop's thread.
    var connections: [CInt: FrontConnection] = [:]
    var nextConnection: UInt64 = 0
    let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// Replies made during one read, written with one call.
    var output: [UInt8] = []
    var now: Int64 = 0
    var lastCheck: Int64 = 0
    var acceptPausedUntil: Int64?

    init(
        listener: CInt, limits: VarlinkServer.Limits, fastPath: VarlinkServer.FastPath?, service: VarlinkService,
        open: ConnectionCount, logger: Logger, handOff: @escaping @Sendable (HandedOff) -> Void,
        ended: @escaping @Sendable () -> Void
    ) throws {
        self.listener = listener
        self.limits = limits
        self.fastPath = fastPath
        self.service = service
        self.open = open
        self.logger = logger
        self.handOff = handOff
        self.ended = ended
        let flags = fcntl(listener, F_GETFL)
        guard flags >= 0, fcntl(listener, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw SocketSetupError(path: "listening socket", operation: "fcntl", errno: errno)
        }
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        wake = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        mail = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard epoll >= 0, wake >= 0, mail >= 0 else {
            throw SocketSetupError(path: "listening socket", operation: "epoll", errno: errno)
        }
        for fd in [listener, wake, mail] where !watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) {
            throw SocketSetupError(path: "listening socket", operation: "epoll_ctl", errno: errno)
        }
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

    /// From the service's task: a call's replies, for the loop to write.
    func post(_ replies: [UInt8], fd: CInt, connection: UInt64) {
        finished.withLock { mailbox in
            guard mailbox.open else { return }
            if mailbox.isEmpty { ring() }
            mailbox.items.append((fd, connection, replies))
        }
    }

    /// Returns once the loop has come round to it: a hung loop never returns
    /// (the watchdog's health check). Returns at once if the loop has ended.
    func ping() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waiting = finished.withLock { mailbox -> Bool in
                guard mailbox.open else { return false }
                if mailbox.isEmpty { ring() }
                mailbox.pings.append(continuation)
                return true
            }
            if !waiting { continuation.resume() }
        }
    }

    /// Test-only (the watchdog test): the loop's thread stops for good.
    func hangForTesting() {
        finished.withLock { mailbox in
            guard mailbox.open else { return }
            if mailbox.isEmpty { ring() }
            mailbox.hang = true
        }
    }

    private func ring() {
        var one: UInt64 = 1
        _ = write(mail, &one, 8)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 1024)
        let interval = limits.checkInterval.nanoseconds
        loop: while true {
            let timeout = Int32(interval / 1_000_000)
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 1024, timeout) }
            if count < 0, errno != EINTR {
                logger.critical("server loop failed", metadata: ["error": "\(String(cString: strerror(errno)))"])
                break
            }
            now = Self.monotonicNow()
            var accepting = false
            for index in 0..<max(0, Int(count)) {
                let fd = events[index].data.fd
                if fd == wake { break loop }
                if fd == listener {
                    accepting = true
                } else if fd == mail {
                    deliverFinished()
                } else if let connection = connections[fd] {
                    ready(connection, flags: events[index].events)
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
        let waiting = finished.withLock { mailbox in
            mailbox.open = false
            return mailbox.pings
        }
        for ping in waiting { ping.resume() }
        for connection in Array(connections.values) { close(connection) }
        for fd in [listener, epoll, wake, mail] { Glibc.close(fd) }
        input.deallocate()
        ended()
    }

    private func deliverFinished() {
        var count: UInt64 = 0
        _ = read(mail, &count, 8)
        let (batch, pings, hang) = finished.withLock { mailbox in
            defer {
                mailbox.items = []
                mailbox.pings = []
            }
            return (mailbox.items, mailbox.pings, mailbox.hang)
        }
        if hang {
            logger.critical("front loop hanging on purpose (TOKEND_TEST_HOOKS)")
            while true { sleep(3600) }
        }
        for ping in pings { ping.resume() }
        for item in batch {
            guard let connection = connections[item.fd], connection.id == item.connection else { continue }
            answered(connection, replies: item.replies)
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
            let peer = PeerCredentials.of(socket: fd)
            guard open.admit(limit: limits.maximumConnections) else {
                handOff(HandedOff(fd: fd, peer: peer, admitted: false, unread: [], unwritten: []))
                continue
            }
            guard watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) else {
                Glibc.close(fd)
                open.release()
                continue
            }
            nextConnection += 1
            connections[fd] = FrontConnection(fd: fd, id: nextConnection, peer: peer, now: now)
        }
    }

    // MARK: Ending

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
        for connection in Array(connections.values) where !connection.busy {
            var reason: String?
            if !connection.unprocessed.isEmpty, now - connection.lastRead > frameTimeout {
                reason = "incomplete message for \(frameTimeout / 1_000_000_000) s"
            } else if let since = connection.unwritableSince, now - since > writeTimeout {
                reason = "replies not read for \(writeTimeout / 1_000_000_000) s"
            } else if connection.unprocessed.isEmpty, connection.unwritten.isEmpty,
                now - connection.lastRead > idleTimeout
            {
                reason = "idle for \(idleTimeout / 1_000_000_000) s"
            }
            guard let reason else { continue }
            logger.notice("closing connection", metadata: ["reason": "\(reason)"])
            close(connection)
        }
    }

    /// Gives the connection to SwiftNIO with what is owed to it.
    func pass(_ connection: FrontConnection, unread: [UInt8]) {
        _ = watch(connection.fd, events: 0, operation: EPOLL_CTL_DEL)
        connections[connection.fd] = nil
        connection.gone = true
        var unwritten = connection.unwritten
        unwritten.append(contentsOf: output)
        output.removeAll(keepingCapacity: true)
        handOff(
            HandedOff(fd: connection.fd, peer: connection.peer, admitted: true, unread: unread, unwritten: unwritten))
    }

    func close(_ connection: FrontConnection) {
        connections[connection.fd] = nil
        connection.gone = true
        Glibc.close(connection.fd)
        open.release()
    }

    func watch(_ fd: CInt, events: UInt32, operation: Int32) -> Bool {
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
    /// Tells this connection from a later one that reuses its descriptor.
    let id: UInt64
    let peer: PeerCredentials?
    var lastRead: Int64
    /// Bytes read and not yet taken: the start of an unfinished message, or
    /// the calls that came after one the service is handling.
    var unprocessed: [UInt8] = []
    var unwritten: [UInt8] = []
    var unwritableSince: Int64?
    /// A call is with the service; the connection is not read until it answers.
    var busy = false
    /// Closed or handed over.
    var gone = false
    /// The epoll events asked for.
    var interest = EPOLLIN.rawValue
    /// The last frame parsed, and its call.
    var lastFrame: [UInt8] = []
    var lastCall: VarlinkCall?

    init(fd: CInt, id: UInt64, peer: PeerCredentials?, now: Int64) {
        self.fd = fd
        self.id = id
        self.peer = peer
        self.lastRead = now
    }
}
