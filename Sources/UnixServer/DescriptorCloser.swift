import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Closes the descriptors tokend does not keep, on threads of their own.
///
/// A descriptor a peer hands in can hold close(2) for as long as the peer
/// likes: a socket with SO_LINGER and a send queue nobody drains, a FUSE
/// file, a Unix socket with such descriptors queued on it (closing it drops
/// them, and the last reference's close runs in the closing thread). So
/// nothing that came from a peer is closed on the server loop or the
/// cooperative pool: it is handed here, to its person's lane.
///
/// A lane is one thread while it has descriptors to close and none
/// otherwise, so one person's stuck close holds up only that person's other
/// closes. Sockets get SO_LINGER off before their close. A person is stuck
/// while `limit` of their descriptors wait, or while a close of theirs began
/// `stuckAfter` ago and its thread sleeps in it: the server takes no further
/// descriptors from them (`isStuck`) until their lane moves again.
///
/// "A close" is the lane thread's setsockopt(2) and close(2) of one
/// descriptor (either can sleep for the peer: the socket's lock, the
/// linger); the thread marks its start and end itself, without the lanes'
/// lock. The clock alone would count a quick close whose thread the
/// scheduler has not run for that long (a loaded machine: issue 50); the
/// kernel says whether the thread sleeps (/proc/self/task/TID/stat, state S
/// or D; R for one on a CPU or waiting for one), and inside the marks it can
/// sleep only in those two calls. That file stays readable to tokend's own
/// user when PR_SET_DUMPABLE is off, unlike /proc/…/syscall. Where /proc
/// cannot say, the clock alone decides; a close seen asleep past
/// `stuckAfter` stays stuck until it returns, and one that does not sleep but
/// does not end either is bounded by `limit`.
public final class DescriptorCloser: Sendable {
    public let limit: Int
    /// Descriptors of everyone waiting at most: past it the server takes no
    /// new connection until the lanes move (they hold its descriptors).
    public let totalLimit: Int
    let stuckAfter: Duration
    private let lanes = Mutex<[UInt32: Lane]>([:])
    #if TOKEND_TEST_HOOKS
    /// Test builds only: runs on the lane's thread once a close has begun,
    /// before its setsockopt(2): a thread held there running, as one the
    /// scheduler does not run for a while would be.
    let beforeClose = Mutex<(@Sendable (CInt) -> Void)?>(nil)
    #endif

    private struct Lane {
        var queue: [CInt] = []
        /// Queued, and the one being closed.
        var pending = 0
        /// When the lane's close in progress began.
        let closing = Closing()
        /// The thread serving the lane, once it runs (nil where /proc does not say).
        var thread: pid_t?
        /// The close in progress was seen asleep in close(2) past `stuckAfter`.
        var stuck = false
        /// A thread serves the lane.
        var running = false
    }

    /// When a lane's close in progress began (CLOCK_MONOTONIC, ns), 0 between
    /// closes: written by the lane's thread alone, and not under the lanes'
    /// lock, so a thread whose close has returned never waits for that lock
    /// while it still counts as closing (it would then sleep, in futex(2)).
    final class Closing: Sendable {
        let since = Atomic<Int64>(0)
    }

    public init(limit: Int = 256, totalLimit: Int = 4096, stuckAfter: Duration = .seconds(1)) {
        self.limit = limit
        self.totalLimit = totalLimit
        self.stuckAfter = stuckAfter
    }

    /// Takes `fd`, which counts for `person`, and closes it on their lane.
    public func close(_ fd: CInt, for person: UInt32) {
        let idle = lanes.withLock { lanes in
            lanes[person, default: Lane()].queue.append(fd)
            lanes[person]!.pending += 1
            defer { lanes[person]!.running = true }
            return !lanes[person]!.running
        }
        if idle { startLane(for: person) }
    }

    /// Descriptors of `person` not yet closed.
    public func pending(for person: UInt32) -> Int {
        lanes.withLock { $0[person]?.pending ?? 0 }
    }

    /// Whether as many of `person`'s descriptors wait as may, or a close of
    /// theirs began `stuckAfter` ago and its thread sleeps in it.
    public func isStuck(_ person: UInt32) -> Bool {
        let now = Self.monotonic()
        let after = stuckAfter.components.seconds * 1_000_000_000 + stuckAfter.components.attoseconds / 1_000_000_000
        return lanes.withLock { lanes in
            guard let lane = lanes[person] else { return false }
            if lane.pending >= limit || lane.stuck { return true }
            let since = lane.closing.since.load(ordering: .acquiring)
            guard since != 0, now - since >= after else { return false }
            if let thread = lane.thread, let asleep = Self.asleep(thread) {
                // Asleep when the kernel was asked, and still in the same close after: the sleep
                // was in it (a thread past its close clears the mark before anything else).
                guard asleep, lane.closing.since.load(ordering: .acquiring) == since else { return false }
            }
            lanes[person]!.stuck = true
            return true
        }
    }

    /// The thread serving `person`'s lane, while one does.
    func thread(for person: UInt32) -> pid_t? {
        lanes.withLock { $0[person]?.thread }
    }

    /// Descriptors of everyone not yet closed.
    public var pending: Int { lanes.withLock { $0.values.reduce(0) { $0 + $1.pending } } }

    /// Whether `totalLimit` descriptors wait.
    public var isFull: Bool { pending >= totalLimit }

    private func startLane(for person: UInt32) {
        final class Start {
            let closer: DescriptorCloser
            let person: UInt32
            init(_ closer: DescriptorCloser, _ person: UInt32) {
                self.closer = closer
                self.person = person
            }
        }
        var thread = pthread_t()
        let argument = Unmanaged.passRetained(Start(self, person)).toOpaque()
        let started = pthread_create(
            &thread, nil,
            { argument in
                let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
                start.closer.drain(start.person)
                return nil
            }, argument)
        guard started == 0 else {
            // No thread to be had now: the descriptors wait, and the person's next close tries
            // again. Closing them here would be on the loop or the pool.
            Unmanaged<Start>.fromOpaque(argument).release()
            lanes.withLock { $0[person]?.running = false }
            return
        }
        pthread_detach(thread)
    }

    /// Closes the lane's descriptors in order; the lane ends once it is empty.
    private func drain(_ person: UInt32) {
        let thread = Self.currentThread()
        while let (fd, closing) = next(for: person, thread: thread) {
            closing.since.store(Self.monotonic(), ordering: .releasing)
            #if TOKEND_TEST_HOOKS
            beforeClose.withLock { $0 }?(fd)
            #endif
            Self.closeWithoutLinger(fd)
            closing.since.store(0, ordering: .releasing)
            lanes.withLock {
                $0[person]?.pending -= 1
                $0[person]?.stuck = false
            }
        }
    }

    private func next(for person: UInt32, thread: pid_t?) -> (CInt, Closing)? {
        lanes.withLock { lanes in
            guard let lane = lanes[person], !lane.queue.isEmpty else {
                lanes[person] = nil
                return nil
            }
            lanes[person]!.thread = thread
            return (lanes[person]!.queue.removeFirst(), lane.closing)
        }
    }

    static func monotonic() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    /// SO_LINGER off first (for a socket; anything else refuses it and is
    /// closed as it is): a socket's unsent data no longer holds the close.
    static func closeWithoutLinger(_ fd: CInt) {
        var off = linger(l_onoff: 0, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, socklen_t(MemoryLayout<linger>.size))
        Glibc.close(fd)
    }
}
