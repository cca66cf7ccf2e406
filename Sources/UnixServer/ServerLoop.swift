import CLinux
import Logging
import Synchronization
import TokendMetrics
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// The server: one thread with epoll that owns the listening socket and
/// every connection, for the connection's whole life.
///
/// - A call the fast path answers at once (a cached token) is answered where
///   it is read, one write per read. The same call again on the same
///   connection gets the same bytes while the fast path's stamp holds (a
///   client asking for its token in a loop costs a comparison, not a lookup).
/// - Any other call goes to the service in a task; its replies come back
///   through the mailbox and the loop writes them. The connection is not read
///   meanwhile, so replies stay in order. A `more` call's replies come back
///   one by one; the task learns when each is on the socket.
/// - A `more` call whose service hands it to a Broadcast (a session's
///   subscribers) has no task: the loop writes each published reply to every
///   member, and tells the publisher once all have taken it.
/// - A malformed or oversized message is answered and the connection closed;
///   `upgrade` is answered with an error.
/// - A connection over the limit, or from a peer the admission check turns
///   away, is answered and closed here: no task, and no slot.
/// - Slots and bytes are budgeted per person: the uid, or the owner of the
///   subordinate range (/etc/subuid) the uid is in.
/// Frame, idle and write timeouts are checked once a second. An epoll
/// failure ends the loop and `ended` is given the error: a server that
/// cannot turn its loop is not kept half alive.
final class ServerLoop: @unchecked Sendable {
    let listener: CInt
    let limits: VarlinkServer.Limits
    let errors: VarlinkServer.Errors
    let fastPath: VarlinkServer.FastPath?
    let fastPathStamp: VarlinkServer.FastPathStamp
    let admission: VarlinkServer.Admission?
    let subordinateIDs: SubordinateIDsBox
    let service: VarlinkService
    let logger: Logger
    let metrics: ServerMetrics?
    /// The metrics listener and its connections (see HTTPListener).
    let http: HTTPListener?
    let httpListener: CInt?
    var httpConnections: [CInt: HTTPConnection] = [:]
    /// Called once when the loop ends: with nil after `stop()`, else with why.
    let ended: @Sendable (Error?) -> Void
    let epoll: CInt
    /// Written once by `stop()`.
    let wake: CInt
    /// Written when the mailbox gains its first entry.
    let mail: CInt
    /// Closes what tokend does not keep of what peers passed, off the loop.
    let closer: DescriptorCloser
    let intake: DescriptorIntake
    /// The method the loop answers to take a descriptor with a connection's next call.
    let descriptorMethod: String?
    let stopping = Atomic(false)
    let mailbox = Mutex(Mailbox())

    // Everything below belongs to the loop's thread.
    var connections: [CInt: Connection] = [:]
    /// Each broadcast's members, by descriptor.
    var members: [ObjectIdentifier: [CInt: Connection]] = [:]
    /// Admitted connections (refused ones are kept apart, briefly).
    var admitted = 0
    var refusedHeld = 0
    /// Connections per caller person (admins are not counted here).
    var perPerson: [UInt32: Int] = [:]
    /// Bytes held per person: unfinished messages, calls not yet taken, replies not yet written.
    /// Connections through shares hold a budget of their own, in their creator's name: what
    /// a share's far side holds never takes from the creator's own calls on the main socket.
    var bufferedPerPerson: [UInt32: Int] = [:]
    var bufferedThroughShares: [UInt32: Int] = [:]
    /// The most connections held since memory was last handed back.
    var peakConnections = 0
    /// This many connections gone since that peak is a burst that has ended.
    static let burst = 1000
    var refusedSinceLog = 0
    var lastRefusalLog: Int64 = 0
    var nextConnection: UInt64 = 0
    let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// Where a descriptor passed with a call is received (PassedDescriptor).
    let control = UnsafeMutableRawBufferPointer.allocate(byteCount: ServerLoop.controlLength, alignment: 16)
    /// Listening sockets served beside `listener` (SideListener), by descriptor.
    var sides: [CInt: SideListener] = [:]
    /// Connections through side listeners, per person they count for.
    var sidePerPerson: [UInt32: Int] = [:]
    var pausedSides: [SideListener] = []
    /// Replies made during one read, written with one call.
    var output: [UInt8] = []
    /// CLOCK_MONOTONIC, for timeouts: a suspended machine's clients do not time out for it.
    var now: Int64 = 0
    /// CLOCK_BOOTTIME, for reusing a fast reply: a token's life goes on while the machine sleeps.
    var bootNow: Int64 = 0
    var lastCheck: Int64 = 0
    var acceptPausedUntil: Int64?
    var lastAcceptFailureLog: Int64 = .min / 2
    /// Buffer capacity given back to the allocator since the last check;
    /// past `trimAfter` the check hands the freed memory back to the system.
    var releasedBytes = 0
    static let trimAfter = 1 << 20

    init(
        listener: CInt, limits: VarlinkServer.Limits, errors: VarlinkServer.Errors, fastPath: VarlinkServer.FastPath?,
        fastPathStamp: @escaping VarlinkServer.FastPathStamp, admission: VarlinkServer.Admission?,
        subordinateIDs: SubordinateIDsBox, service: VarlinkService, logger: Logger,
        metrics: ServerMetrics? = nil, http: HTTPListener? = nil, httpListener: CInt? = nil,
        descriptors: VarlinkServer.Descriptors = .init(), ended: @escaping @Sendable (Error?) -> Void
    ) throws {
        // Set on the listener, the refusal holds for every connection from the
        // moment it is made (accepted sockets inherit it), before any read.
        intake = !descriptors.drain && Self.allowDescriptors(on: listener, false) ? .kernelRefuses : .drain
        closer = descriptors.closer
        descriptorMethod = descriptors.method
        self.metrics = metrics
        self.http = http
        self.httpListener = httpListener
        self.subordinateIDs = subordinateIDs
        self.listener = listener
        self.limits = limits
        self.errors = errors
        self.fastPath = fastPath
        self.fastPathStamp = fastPathStamp
        self.admission = admission
        self.service = service
        self.logger = logger
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
        for fd in [listener, wake, mail] + (httpListener.map { [$0] } ?? [])
        where !watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) {
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
                let loop = Unmanaged<ServerLoop>.fromOpaque(argument!).takeRetainedValue()
                loop.run()
                return nil
            }, Unmanaged.passRetained(self).toOpaque())
        precondition(started == 0, "cannot start the server's thread: \(String(cString: strerror(started)))")
        pthread_detach(thread)
    }

    /// Ends the loop: it closes the listening socket and every connection,
    /// then calls `ended` (which it also does if epoll fails).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 1024)
        let interval = limits.checkInterval.nanoseconds
        var failure: Error?
        loop: while true {
            // Accepting again after a shortage of descriptors is not left to the check.
            let wait = acceptPausedUntil.map { min(interval, max(0, $0 - now)) } ?? interval
            let count = events.withUnsafeMutableBufferPointer {
                epoll_wait(epoll, $0.baseAddress, 1024, Int32(clamping: (wait + 999_999) / 1_000_000))
            }
            if count < 0, errno != EINTR {
                let reason = "failed: epoll_wait: \(String(cString: strerror(errno)))"
                logger.critical("server loop failed", metadata: ["error": "\(reason)"])
                failure = ServerLoopFailed(reason: reason)
                break
            }
            now = Self.clock(CLOCK_MONOTONIC)
            bootNow = Self.clock(CLOCK_BOOTTIME)
            if let until = acceptPausedUntil, now >= until { resumeAccepting() }
            var accepting = false
            var acceptingHTTP = false
            var acceptingSides: [SideListener] = []
            for index in 0..<max(0, Int(count)) {
                let fd = events[index].data.fd
                if fd == wake { break loop }
                if fd == listener {
                    accepting = true
                } else if fd == mail {
                    deliverMail()
                } else if let side = sides[fd] {
                    acceptingSides.append(side)
                } else if let connection = connections[fd] {
                    ready(connection, flags: events[index].events)
                } else if fd == httpListener {
                    acceptingHTTP = true
                } else if let connection = httpConnections[fd] {
                    httpReady(connection, flags: events[index].events)
                }
            }
            // After the batch: a descriptor closed above and reused by accept
            // must not receive the rest of the batch's events for the old one.
            if accepting { acceptAll() }
            if acceptingHTTP { acceptHTTP() }
            for side in acceptingSides { acceptSide(side) }
            if now - lastCheck >= interval {
                lastCheck = now
                check()
            }
        }
        closeMailbox(failure: failure)
        for connection in Array(connections.values) { close(connection) }
        for connection in Array(httpConnections.values) { httpClose(connection) }
        for fd in [listener, epoll, wake, mail] + (httpListener.map { [$0] } ?? []) { Glibc.close(fd) }
        for side in sides.values { closer.close(side.fd, for: side.person) }
        sides = [:]
        input.deallocate()
        control.deallocate()
        ended(failure)
    }

    // MARK: Accepting

    private func acceptAll() {
        // Descriptors waiting on the closer hold tokend's own: past the limit no new
        // connection is taken (answers to those open go on) until the lanes move.
        guard !closer.isFull else { return pauseAccepting() }
        for _ in 0..<256 {
            let fd = accept4(listener, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            guard fd >= 0 else {
                switch errno {
                case EAGAIN, EINTR: return
                case ECONNABORTED, EPROTO: continue
                default:
                    // Out of descriptors or memory: stop accepting until a
                    // connection closes or `acceptRetry` passes, rather than
                    // spin on a listener that stays readable.
                    if now - lastAcceptFailureLog >= 1_000_000_000 {
                        logger.warning(
                            "cannot accept connections", metadata: ["error": "\(String(cString: strerror(errno)))"])
                        lastAcceptFailureLog = now
                    }
                    return pauseAccepting()
                }
            }
            var peer = PeerCredentials.of(socket: fd)
            let person = person(of: peer)
            peer?.person = person
            switch admission?(peer) ?? .caller {
            case .refused(let error):
                metrics?.refused(.permission)
                refuse(fd, peer: peer, with: error, reason: "peer may call nothing")
            case .admin where admitted < limits.maximumConnections + limits.adminConnections:
                register(fd, peer: peer, refused: false)
            case .caller where admitted < limits.maximumConnections:
                guard perPerson[person, default: 0] < limits.maximumConnectionsPerUser else {
                    // The answer names the limit that refused it, not the server's.
                    var error = errors.overloaded
                    if error.parameters["limit"] != nil {
                        error.parameters["limit"] = .int(limits.maximumConnectionsPerUser)
                    }
                    metrics?.refused(.perUser)
                    refuse(
                        fd, peer: peer, with: error, reason: "too many connections from one user",
                        limit: limits.maximumConnectionsPerUser)
                    continue
                }
                if let connection = register(fd, peer: peer, refused: false) {
                    perPerson[person, default: 0] += 1
                    connection.holdsSlot = true
                }
            default:
                metrics?.refused(.connections)
                refuse(fd, peer: peer, with: errors.overloaded, reason: "too many connections")
            }
        }
    }

    @discardableResult
    func register(_ fd: CInt, peer: PeerCredentials?, refused: Bool, side: SideListener? = nil) -> Connection? {
        let sender = person(of: peer)
        let mayHoldDescriptors = mayHoldDescriptors(fd)
        guard Self.urgentInline(fd), watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) else {
            closeAccepted(fd, person: sender, mayHoldDescriptors: mayHoldDescriptors)
            return nil
        }
        nextConnection += 1
        let connection = Connection(
            fd: fd, id: nextConnection, peer: peer, person: side?.person ?? sender, sender: sender, now: now,
            refused: refused, mayHoldDescriptors: mayHoldDescriptors)
        connection.side = side
        connections[fd] = connection
        if refused {
            refusedHeld += 1
        } else {
            admitted += 1
            metrics?.accepted.increment()
            metrics?.connections.set(admitted)
        }
        return connection
    }

    /// Answers the client's first message with `error` and closes (so that
    /// the answer is to a call, and read rather than lost to a reset); a
    /// client that sends nothing within a short linger is answered and
    /// closed then. Refused connections hold no slot and no task; beyond as
    /// many as the limit they are answered and closed at once.
    func refuse(
        _ fd: CInt, peer: PeerCredentials?, with error: VarlinkError, reason: String, limit: Int? = nil
    ) {
        refusedSinceLog += 1
        if now - lastRefusalLog >= 1_000_000_000 {
            logger.warning(
                "connection refused: \(reason)",
                metadata: [
                    "limit": "\(limit ?? limits.maximumConnections)", "refused": "\(refusedSinceLog)",
                    "peer.uid": "\(peer.map { String($0.uid) } ?? "unknown")",
                    "peer.pid": "\(peer.map { String($0.pid) } ?? "unknown")",
                ])
            lastRefusalLog = now
            refusedSinceLog = 0
        }
        guard refusedHeld < limits.maximumConnections else {
            Self.answer(fd, error)
            closeAccepted(fd, person: person(of: peer), mayHoldDescriptors: mayHoldDescriptors(fd))
            return
        }
        guard let connection = register(fd, peer: peer, refused: true) else { return }
        connection.refusal = error
    }

    /// Whose budgets a peer counts in; read at accept only (the table may be reloaded).
    func person(of peer: PeerCredentials?) -> UInt32 {
        guard let peer else { return UInt32.max }
        return subordinateIDs.value.withLock { $0.person(of: peer.uid) }
    }

    /// Not accepting until a connection closes or `acceptRetry` passes, rather
    /// than spin on a listener that stays readable.
    private func pauseAccepting() {
        _ = watch(listener, events: 0, operation: EPOLL_CTL_DEL)
        acceptPausedUntil = now.addingSaturating(limits.acceptRetry.nanoseconds)
    }

    private func resumeAccepting() {
        acceptPausedUntil = nil
        _ = watch(listener, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
    }

    static func answer(_ fd: CInt, _ error: VarlinkError) {
        var frame: [UInt8] = []
        VarlinkReply(error).encode(into: &frame)
        _ = frame.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    // MARK: Ending

    /// Closes connections that hold resources without using them.
    private func check() {
        // A burst of clients has come and gone (a worker pool, a stampede), or
        // connections' buffers have given back a megabyte or more (large
        // messages, backlogs): the memory goes back to the system rather than
        // staying with tokend. At most once a check, so a trim costs little.
        peakConnections = max(peakConnections, admitted)
        if peakConnections - admitted >= Self.burst || releasedBytes >= Self.trimAfter {
            malloc_trim(0)
            peakConnections = admitted
            releasedBytes = 0
        }
        let frameTimeout = limits.frameTimeout.nanoseconds
        let writeTimeout = limits.writeTimeout.nanoseconds
        let idleTimeout = limits.idleTimeout.nanoseconds
        checkHTTP()
        resumeSides()
        for connection in Array(connections.values) {
            if connection.refused {
                if now - connection.lastActive > limits.refusedLinger.nanoseconds { closeRefused(connection) }
                continue
            }
            var reason: String?
            var closing = ServerMetrics.Closing.idle
            if !connection.unwritten.isEmpty, now - connection.lastProgress > writeTimeout {
                reason = "replies not read for \(writeTimeout / 1_000_000_000) s"
                closing = .writeTimeout
            } else if connection.busy {
                continue  // a call in progress or a subscriber waiting for events is not idle
            } else if let started = connection.frameStarted, now - started > frameTimeout {
                reason = "incomplete message for \(frameTimeout / 1_000_000_000) s"
                closing = .frameTimeout
            } else if connection.unprocessed.isEmpty, connection.unwritten.isEmpty,
                now - connection.lastActive > idleTimeout
            {
                reason = "idle for \(idleTimeout / 1_000_000_000) s"
            }
            guard let reason else { continue }
            metrics?.closed(closing)
            logger.notice("closing connection", metadata: ["reason": "\(reason)"])
            close(connection)
        }
    }

    /// A refused connection's answer, then its end.
    func closeRefused(_ connection: Connection) {
        if let refusal = connection.refusal { Self.answer(connection.fd, refusal) }
        close(connection)
    }

    func close(_ connection: Connection) {
        guard !connection.gone else { return }
        connections[connection.fd] = nil
        connection.gone = true
        closeAccepted(connection.fd, person: connection.sender, mayHoldDescriptors: connection.mayHoldDescriptors)
        if acceptPausedUntil != nil { resumeAccepting() }  // a descriptor is free again
        if connection.refused {
            refusedHeld -= 1
        } else {
            admitted -= 1
            metrics?.connections.set(admitted)
        }
        if connection.holdsSlot { release(connection.person) }
        leftSide(connection)
        if let passed = connection.passed { discard(passed.fd, of: connection) }
        connection.passed = nil
        account(connection, holding: 0)
        releasedBytes += connection.unprocessed.capacity + connection.unwritten.capacity
        connection.stream?.cancel()
        leave(connection)
        for waiting in connection.deliveries { waiting.delivery.complete(written: false) }
        connection.deliveries = []
    }

    /// Records how many bytes the connection holds (read and not taken,
    /// written and not sent); false when its person's connections together
    /// hold more than they may.
    @discardableResult
    func account(_ connection: Connection, holding bytes: Int) -> Bool {
        let previous = connection.accounted
        guard bytes != previous else { return true }
        let total: Int
        if connection.side == nil {
            total = bufferedPerPerson[connection.person, default: 0] - previous + bytes
            bufferedPerPerson[connection.person] = total > 0 ? total : nil
        } else {
            total = bufferedThroughShares[connection.person, default: 0] - previous + bytes
            bufferedThroughShares[connection.person] = total > 0 ? total : nil
        }
        connection.accounted = bytes
        // A connection that holds less than before is not the one to blame.
        return bytes < previous || total <= limits.maximumBufferedBytesPerPerson
    }

    private func release(_ person: UInt32) {
        let left = perPerson[person, default: 1] - 1
        perPerson[person] = left > 0 ? left : nil
    }

    func watch(_ fd: CInt, events: UInt32, operation: Int32) -> Bool {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        return epoll_ctl(epoll, operation, fd, &event) == 0
    }

    static func clock(_ id: clockid_t) -> Int64 {
        var time = timespec()
        clock_gettime(id, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
