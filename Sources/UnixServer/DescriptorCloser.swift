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
/// while `limit` of their descriptors wait, or while a close of theirs has
/// not returned for `stuckAfter` and its thread sleeps in close(2): the
/// server takes no further descriptors from them (`isStuck`) until their
/// lane moves again. The clock alone would count a quick close whose thread
/// the scheduler has not run for that long (a loaded machine: issue 50), or
/// that has not reached close(2) yet; the kernel says which system call a
/// thread sleeps in (/proc/self/task/TID/syscall: "running" for one on a CPU
/// or waiting for one). Where /proc cannot say, the clock alone decides; a
/// close seen asleep past `stuckAfter` stays stuck until it returns, and one
/// that does not sleep but does not end either is bounded by `limit`.
public final class DescriptorCloser: Sendable {
    public let limit: Int
    /// Descriptors of everyone waiting at most: past it the server takes no
    /// new connection until the lanes move (they hold its descriptors).
    public let totalLimit: Int
    let stuckAfter: Duration
    private let lanes = Mutex<[UInt32: Lane]>([:])
    #if TOKEND_TEST_HOOKS
    /// Test builds only: runs on the lane's thread before each close, as a
    /// thread held before its close (not run, or not there yet) would be.
    let beforeClose = Mutex<(@Sendable (CInt) -> Void)?>(nil)
    #endif

    private struct Lane {
        var queue: [CInt] = []
        /// Queued, and the one being closed.
        var pending = 0
        /// When the close in progress began (CLOCK_MONOTONIC, ns).
        var closingSince: Int64?
        /// The thread serving the lane, once it runs (nil where /proc does not say).
        var thread: pid_t?
        /// The close in progress was seen asleep in close(2) past `stuckAfter`.
        var stuck = false
        /// A thread serves the lane.
        var running = false
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
    /// theirs has not returned for `stuckAfter` and sleeps in close(2).
    public func isStuck(_ person: UInt32) -> Bool {
        let now = Self.monotonic()
        let after = stuckAfter.components.seconds * 1_000_000_000 + stuckAfter.components.attoseconds / 1_000_000_000
        return lanes.withLock { lanes in
            guard let lane = lanes[person] else { return false }
            if lane.pending >= limit || lane.stuck { return true }
            guard let since = lane.closingSince, now - since >= after else { return false }
            // Asked under the lock, so the answer is about this close: its thread cannot take the
            // next one meanwhile (one whose close returned waits for the lock, in futex(2)).
            let stuck = lane.thread.flatMap(Self.asleepInClose) ?? true
            lanes[person]!.stuck = stuck
            return stuck
        }
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
        while let fd = next(for: person, thread: thread) {
            #if TOKEND_TEST_HOOKS
            beforeClose.withLock { $0 }?(fd)
            #endif
            Self.closeWithoutLinger(fd)
            lanes.withLock {
                $0[person]?.pending -= 1
                $0[person]?.closingSince = nil
                $0[person]?.stuck = false
            }
        }
    }

    private func next(for person: UInt32, thread: pid_t?) -> CInt? {
        let now = Self.monotonic()
        return lanes.withLock { lanes in
            guard let lane = lanes[person], !lane.queue.isEmpty else {
                lanes[person] = nil
                return nil
            }
            lanes[person]!.closingSince = now
            lanes[person]!.thread = thread
            return lanes[person]!.queue.removeFirst()
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
