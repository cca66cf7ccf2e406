import CLinux
import NIOCore  // NIODeadline
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One thread with epoll that serves the sockets registered with it for
/// their whole lives: a client connection and the upstream connections that
/// serve it are on one loop, so a request never changes threads. Besides
/// sockets, a loop has timers and a mailbox through which other threads
/// (tokend's answers, in tasks) hand it work.
///
/// Sockets are registered once, edge-triggered for reading and writing, so
/// pausing and resuming a socket changes no epoll registration.
final class ProxyLoop: @unchecked Sendable {
    let epoll: CInt
    /// Rung when the mailbox gains its first entry.
    private let bell: CInt
    private let mailbox = Mutex<[@Sendable () -> Void]>([])
    /// The loop's thread, once it runs.
    private var thread: pthread_t?

    // Everything below belongs to the loop's thread.
    /// By descriptor: what each readiness event goes to.
    private var sockets: [Socket?] = []
    /// Each socket's registration carries its descriptor and a number of its own above it, so that an
    /// event still waiting for a closed socket never reaches a new one that reuses the descriptor.
    private var registrations: UInt32 = 0
    /// Listeners this loop accepts from (one connection per wakeup).
    private var listeners: [CInt: () -> Void] = [:]
    /// No listener is watched again (the proxy is stopping).
    var stopped = false
    private var timers = TimerHeap()
    /// Work after the event being handled, before the next wait (a socket's writability, told outside its write).
    private var soon: [() -> Void] = []
    /// Work for the next turn, after the events already waiting (a socket that reads on after a pause).
    private var later: [() -> Void] = []
    /// What every read on this loop reads into; a reader copies out what it keeps.
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    let allocator = ByteBufferAllocator()

    init() throws {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        bell = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard epoll >= 0, bell >= 0 else { throw SocketError("epoll_create1/eventfd", errno) }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: UInt64(bell)))
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, bell, &event) == 0 else { throw SocketError("epoll_ctl", errno) }
    }

    /// As many loops as cores, each on a thread of its own.
    static func start(count: Int) throws -> [ProxyLoop] {
        let loops = try (0..<max(1, count)).map { _ in try ProxyLoop() }
        for loop in loops {
            var thread = pthread_t()
            let started = pthread_create(
                &thread, nil,
                { argument in
                    Unmanaged<ProxyLoop>.fromOpaque(argument!).takeRetainedValue().run()
                    return nil
                }, Unmanaged.passRetained(loop).toOpaque())
            guard started == 0 else { throw SocketError("pthread_create", started) }
            pthread_detach(thread)
        }
        return loops
    }

    /// Whether the caller is on this loop's thread.
    var inLoop: Bool { thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }

    /// Runs `body` on the loop's thread, from any thread.
    func execute(_ body: @escaping @Sendable () -> Void) {
        let first = mailbox.withLock { box in
            box.append(body)
            return box.count == 1
        }
        if first {
            var one: UInt64 = 1
            _ = write(bell, &one, 8)
        }
    }

    /// Runs `body` after the event being handled (on the loop's thread).
    func afterEvent(_ body: @escaping () -> Void) { soon.append(body) }

    /// Runs `body` on the loop's next turn, after the events waiting now.
    func nextTurn(_ body: @escaping () -> Void) { later.append(body) }

    /// Runs `body` at `deadline` unless cancelled first; on the loop's thread.
    func schedule(at deadline: NIODeadline, _ body: @escaping () -> Void) -> TimerHeap.ID {
        timers.add(at: deadline.uptimeNanoseconds, body)
    }

    func cancel(_ timer: TimerHeap.ID) { timers.cancel(timer) }

    /// Events on `fd` go to `socket` from now on.
    func register(_ socket: Socket) throws {
        let fd = Int(socket.fd)
        if sockets.count <= fd { sockets.append(contentsOf: repeatElement(nil, count: fd + 1 - sockets.count)) }
        sockets[fd] = socket
        registrations = registrations == .max ? 1 : registrations + 1  // never 0, which marks the loop's own descriptors
        socket.registration = UInt64(registrations) << 32 | UInt64(UInt32(bitPattern: socket.fd))
        let wanted = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
        var event = epoll_event(events: wanted, data: epoll_data_t(u64: socket.registration))
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, socket.fd, &event) == 0 else {
            sockets[fd] = nil
            throw SocketError("epoll_ctl", errno)
        }
    }

    /// The socket's descriptor is about to be closed (which takes it out of epoll).
    func forget(_ socket: Socket) {
        let fd = Int(socket.fd)
        if fd < sockets.count, sockets[fd] === socket { sockets[fd] = nil }
    }

    /// `accept` runs when `listener` has a connection; every loop may watch the same listener, and the
    /// kernel wakes one of them per connection (EPOLLEXCLUSIVE).
    func watch(listener: CInt, _ accept: @escaping () -> Void) throws {
        var event = epoll_event(events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue, data: epoll_data_t(u64: UInt64(listener)))
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event) == 0 else { throw SocketError("epoll_ctl", errno) }
        listeners[listener] = accept
    }

    /// The listener is no longer watched by this loop (the proxy is stopping).
    func unwatch(listener: CInt) {
        guard listeners.removeValue(forKey: listener) != nil else { return }
        epoll_ctl(epoll, EPOLL_CTL_DEL, listener, nil)
    }

    /// The listener is not watched by this loop for `time` (accepting failed for want of descriptors or memory).
    func pause(listener: CInt, for time: TimeAmount) {
        guard let accept = listeners.removeValue(forKey: listener) else { return }
        epoll_ctl(epoll, EPOLL_CTL_DEL, listener, nil)
        rewatch(listener, accept, after: time)
    }

    private func rewatch(_ listener: CInt, _ accept: @escaping () -> Void, after time: TimeAmount) {
        _ = schedule(at: .now() + time) { [self] in
            guard !stopped else { return }
            do { try watch(listener: listener, accept) } catch { rewatch(listener, accept, after: time) }
        }
    }

    /// Serves until the process ends: an epoll failure ends the process, as a loop that cannot turn
    /// would leave its connections hanging.
    private func run() {
        thread = pthread_self()
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while true {
            let timeout =
                !later.isEmpty
                ? 0
                : timers.next().map { next -> Int32 in
                    let now = NIODeadline.now().uptimeNanoseconds
                    return next <= now ? 0 : Int32(clamping: (next - now + 999_999) / 1_000_000)
                } ?? -1
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, Int32($0.count), timeout) }
            if count < 0 {
                if errno == EINTR { continue }
                fatalError("tokend-proxy: epoll_wait failed: \(String(cString: strerror(errno)))")
            }
            for index in 0..<Int(count) {
                let event = events[index]
                let registration = event.data.u64
                let fd = CInt(bitPattern: UInt32(truncatingIfNeeded: registration))
                if registration >> 32 == 0 {
                    if fd == bell {
                        deliverMail()
                    } else if let accept = listeners[fd] {
                        accept()
                    }
                } else if Int(fd) < sockets.count, let socket = sockets[Int(fd)], socket.registration == registration {
                    socket.ready(event.events)
                }
                runSoon()
            }
            let turn = later
            later = []
            for body in turn {
                body()
                runSoon()
            }
            let now = NIODeadline.now().uptimeNanoseconds
            while let action = timers.takeDue(now: now) {
                action()
                runSoon()
            }
        }
    }

    private func runSoon() {
        while !soon.isEmpty {
            let work = soon
            soon = []
            for body in work { body() }
        }
    }

    private func deliverMail() {
        var count: UInt64 = 0
        _ = read(bell, &count, 8)
        let work = mailbox.withLock { box in
            defer { box = [] }
            return box
        }
        for body in work {
            body()
            runSoon()
        }
    }
}

/// A value that belongs to one loop, carried through another thread and used back on the loop.
struct LoopBound<Value>: @unchecked Sendable {
    private let held: Value
    let loop: ProxyLoop

    init(_ value: Value, on loop: ProxyLoop) {
        held = value
        self.loop = loop
    }

    var value: Value {
        precondition(loop.inLoop, "a loop's value used off its loop")
        return held
    }
}

/// A failed system call on a socket, with what it was doing.
struct SocketError: Error, CustomStringConvertible {
    let operation: String
    let code: CInt

    init(_ operation: String, _ code: CInt) {
        self.operation = operation
        self.code = code
    }

    var description: String { "\(operation): \(String(cString: strerror(code)))" }
}
