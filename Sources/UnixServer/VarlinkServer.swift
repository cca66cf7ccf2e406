import CLinux
import Logging
import Synchronization
import TokendMetrics
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Where the server's listening socket comes from.
public enum ListenSource: Sendable {
    /// Bind this path; `mode` is applied to the socket file.
    case path(String, mode: mode_t)
    /// A socket already bound and listening, e.g. passed by systemd.
    case fileDescriptor(CInt)
}

/// Serves a VarlinkService on a Unix stream socket.
///
/// One loop on a thread of its own (ServerLoop) serves every connection for
/// its whole life: plain calls, `more` streams, malformed and oversized
/// messages, and connections over the limit. Calls on a connection are
/// answered in order; a `more` call occupies its connection until its last
/// reply. A connection that sends garbage or an oversized message is
/// answered and closed; the server and other connections are unaffected.
public struct VarlinkServer: Sendable {
    /// What one client may hold. Those tokend.toml sets (connections, idle,
    /// frame and write timeouts) are in tokend.toml(5); every limit, the fixed
    /// ones included, is in docs/architecture.md ("What a connection may hold").
    public struct Limits: Sendable {
        public var maximumFrameLength = 1 << 20
        /// Connections served at once; more are answered `overloadedError` and closed.
        public var maximumConnections = 512
        /// Connections one person (not an admin) may hold: a uid, with the
        /// subordinate uids it owns (`SubordinateIDs`).
        public var maximumConnectionsPerUser = 256
        /// Slots beyond `maximumConnections` that only admins may take, so
        /// that a caller holding every slot cannot lock out Login and Logout.
        public var adminConnections = 16
        /// A connection with no call in progress and no data for this long is closed.
        public var idleTimeout = Duration.seconds(300)
        /// Bytes one person's connections may hold together: messages begun
        /// and not finished, calls read and not yet taken, and replies not yet
        /// written behind the one being written. The connection whose bytes
        /// pass it is closed (slow senders and readers that never read cannot
        /// pile up memory, however many connections or subordinate uids they
        /// use). The reply being written is not counted: a client that reads
        /// is never closed for the size of a reply the server made.
        public var maximumBufferedBytesPerPerson = 4 << 20
        /// A message not finished this long after its first byte closes the connection.
        public var frameTimeout = Duration.seconds(10)
        /// A connection whose replies wait and whose socket takes none of them
        /// for this long (since the last write that made progress) is closed.
        public var writeTimeout = Duration.seconds(30)
        /// Replies waiting per connection before the loop takes no further
        /// call from it: checked before each call is parsed.
        public var writeBufferHighWatermark = 64 * 1024
        /// Replies waiting on one connection behind the one being written
        /// beyond this close it (a stream or broadcast whose client does not
        /// read). The reply being written is bounded by `maximumReplyLength`.
        public var maximumUnwrittenBytes = 4 << 20
        /// The largest reply the server writes (sd-varlink's buffer cap: no
        /// client takes more); a larger one closes the connection.
        public static let maximumReplyLength = 16 << 20
        /// After accept fails for want of descriptors or memory, it is tried
        /// again once a connection closes, or after this long.
        var acceptRetry = Duration.milliseconds(50)
        /// How long a refused connection is kept (to read its first call, so
        /// that the client sees the answer rather than a reset).
        var refusedLinger = Duration.milliseconds(500)
        var checkInterval = Duration.seconds(1)
        public init() {}
    }

    /// Answers a call on the loop when it can (returns the encoded reply
    /// frame, NUL included), or returns nil to let the service handle it.
    public typealias FastPath = @Sendable (VarlinkCall, PeerCredentials?) -> FastReply?

    /// A reply the fast path made, and how long the same call on the same
    /// connection may be given it again without asking: for `reusableFor`,
    /// and while `FastPathStamp` returns what it returned before the call.
    public struct FastReply: Sendable {
        public var bytes: [UInt8]
        public var reusableFor: Duration

        public init(bytes: [UInt8], reusableFor: Duration = .zero) {
            self.bytes = bytes
            self.reusableFor = reusableFor
        }
    }

    /// Changes whenever a fast reply may no longer hold (a token or the access rules changed).
    public typealias FastPathStamp = @Sendable () -> UInt64

    /// Who a peer is to the server, decided once at accept. Runs on the
    /// loop: it must not block.
    public typealias Admission = @Sendable (PeerCredentials?) -> Standing

    public enum Standing: Sendable {
        /// Answered this error and closed: a peer that may call nothing holds no slot.
        case refused(VarlinkError)
        /// Shares the slots, at most `maximumConnectionsPerUser` of them per person.
        case caller
        /// Also has `adminConnections` slots beyond the limit, which no caller can take.
        case admin
    }

    let service: VarlinkService
    let source: ListenSource
    let limits: Limits
    let logger: Logger
    let errors: Errors
    let fastPath: FastPath?
    let fastPathStamp: FastPathStamp
    let admission: Admission?
    /// The running loop, for `healthCheck`.
    let running = RunningLoop()
    /// Whose subordinate uids are whose; replaced by `reloadSubordinateIDs`.
    let subordinateIDs: SubordinateIDsBox
    /// Calls, connections, subscribers and refusals are counted here.
    let metrics: ServerMetrics?
    /// A loopback TCP listener the loop also serves (metrics).
    let http: HTTPListener?
    let descriptors: Descriptors

    /// How descriptors peers pass (SCM_RIGHTS) are taken and let go.
    public struct Descriptors: Sendable {
        /// The method, answered by the loop, after which a connection's next
        /// call may carry one descriptor; nil: no connection takes any.
        public var method: String?
        /// Take every descriptor sent and close those not asked for, as on a
        /// kernel without SO_PASSRIGHTS, even where the kernel could refuse them.
        public var drain = false
        /// Where everything tokend does not keep of them is closed.
        public var closer = DescriptorCloser()
        /// The answer to `method` while the caller's person's closes are stuck.
        public var pendingError: @Sendable (_ pending: Int, _ limit: Int) -> VarlinkError = { _, _ in
            VarlinkError("org.varlink.service.InternalError")
        }
        public init(
            method: String? = nil, drain: Bool = false, closer: DescriptorCloser = DescriptorCloser(),
            pendingError: @escaping @Sendable (_ pending: Int, _ limit: Int) -> VarlinkError = { _, _ in
                VarlinkError("org.varlink.service.InternalError")
            }
        ) {
            self.method = method
            self.drain = drain
            self.closer = closer
            self.pendingError = pendingError
        }
    }

    /// What the server itself answers, outside any method.
    struct Errors: Sendable {
        let oversized: VarlinkError
        let overloaded: VarlinkError
        let descriptorsPending: @Sendable (_ pending: Int, _ limit: Int) -> VarlinkError
        let malformed = VarlinkError.invalidParameter("message")
        let upgrade = VarlinkError.invalidParameter("upgrade")
    }

    public init(
        service: VarlinkService, source: ListenSource, limits: Limits = Limits(), logger: Logger,
        oversizedFrameError: VarlinkError = .invalidParameter("message"),
        overloadedError: VarlinkError = VarlinkError("org.varlink.service.InternalError"),
        fastPath: FastPath? = nil, fastPathStamp: @escaping FastPathStamp = { 0 }, admission: Admission? = nil,
        subordinateIDs: SubordinateIDs = .load(), metrics: ServerMetrics? = nil, http: HTTPListener? = nil,
        descriptors: Descriptors = Descriptors()
    ) {
        self.descriptors = descriptors
        self.metrics = metrics
        self.http = http
        self.subordinateIDs = SubordinateIDsBox(subordinateIDs)
        self.fastPath = fastPath
        self.fastPathStamp = fastPathStamp
        self.admission = admission
        self.service = service
        self.source = source
        self.limits = limits
        self.logger = logger
        self.errors = Errors(
            oversized: oversizedFrameError, overloaded: overloadedError, descriptorsPending: descriptors.pendingError)
    }

    /// Binds (or adopts) the socket; `onListening` runs once it accepts
    /// connections. Returns when the task is cancelled; throws
    /// `SocketSetupError` if the socket cannot be bound or listened on, and
    /// `ServerLoopFailed` if the loop ends on an error (the server then
    /// serves nobody, and its process should end).
    public func run(onListening: @Sendable () async -> Void = {}) async throws {
        let listener: CInt
        switch source {
        case .path(let path, let mode): listener = try Self.listen(path: path, mode: mode)
        case .fileDescriptor(let fd): listener = fd
        }
        let httpListener: CInt?
        do {
            httpListener = try http?.listen()
        } catch {
            close(listener)
            throw error
        }
        let end = LoopEnd()
        let loop: ServerLoop
        do {
            loop = try ServerLoop(
                listener: listener, limits: limits, errors: errors, fastPath: fastPath, fastPathStamp: fastPathStamp,
                admission: admission, subordinateIDs: subordinateIDs, service: service, logger: logger,
                metrics: metrics, http: http, httpListener: httpListener, descriptors: descriptors,
                ended: { end.finish($0) })
        } catch {
            close(listener)
            if let httpListener { close(httpListener) }
            throw error
        }
        loop.start()
        running.loop.withLock { $0 = loop }
        await onListening()
        // Cancellation stops the loop; the wait goes on until it has stopped.
        try await withTaskCancellationHandler {
            try await end.wait()
        } onCancel: {
            loop.stop()
        }
    }

    /// Returns once the server's loop has come round; a stuck loop never
    /// returns. Throws `ServerLoopFailed` if no loop is turning (not
    /// started, stopped, or ended on an error): the watchdog must not be fed.
    public func healthCheck() async throws {
        guard let loop = running.loop.withLock({ $0 }) else { throw ServerLoopFailed(reason: "not running") }
        try await loop.ping()
    }

    /// Replaces whose subordinate uids are whose (the daemon rereads
    /// /etc/subuid on SIGHUP). Connections already open keep the person they
    /// were counted as; new ones are counted by the new table.
    public func reloadSubordinateIDs(_ ids: SubordinateIDs) {
        subordinateIDs.value.withLock { $0 = ids }
    }

    #if TOKEND_TEST_HOOKS
    /// Test builds only: the loop stops for good (see the watchdog test).
    public func hangLoopForTesting() {
        running.loop.withLock { $0 }?.hangForTesting()
    }
    #endif

    /// A bound, listening Unix socket at `path`. A socket file left there by
    /// a tokend that is gone is replaced; the caller makes sure none is
    /// running (the state directory's lock). A burst of clients (a worker
    /// pool starting) waits in the kernel's queue rather than being refused
    /// with EAGAIN: the largest backlog the system allows.
    static func listen(path: String, mode: mode_t) throws -> CInt {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            throw SocketSetupError(path: path, operation: "bind", errno: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        var existing = stat()
        if lstat(path, &existing) == 0 {
            guard existing.st_mode & S_IFMT == S_IFSOCK else {
                throw SocketSetupError(path: path, operation: "bind", errno: EEXIST, reason: "a file that is not a socket is there")
            }
            switch connectionOutcome(address) {
            case 0:
                throw SocketSetupError(
                    path: path, operation: "bind", errno: EADDRINUSE, reason: "another program already listens there")
            case ECONNREFUSED:
                unlink(path)  // left by a server that is gone
            case let failure:
                throw SocketSetupError(
                    path: path, operation: "connect", errno: failure,
                    reason: "cannot tell whether another program listens there")
            }
        }
        // Non-blocking: a listener whose queue is full must not hold startup
        // (and SIGTERM) in connect(2).
        let fd = socket(
            AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SocketSetupError(path: path, operation: "socket", errno: errno) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        func failure(_ operation: String) -> SocketSetupError {
            let error = SocketSetupError(path: path, operation: operation, errno: errno)
            close(fd)
            return error
        }
        guard bound == 0 else { throw failure("bind") }
        guard chmod(path, mode) == 0 else { throw failure("chmod") }
        guard Glibc.listen(fd, systemBacklog()) == 0 else { throw failure("listen") }
        return fd
    }

    /// 0 if something accepts connections at `address`, else connect's
    /// errno: only ECONNREFUSED (nobody listens) lets a socket file be
    /// unlinked, whoever owns it.
    static func connectionOutcome(_ address: sockaddr_un) -> Int32 {
        // Non-blocking: a listener whose queue is full must not hold startup
        // (and SIGTERM) in connect(2).
        let fd = socket(
            AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        var address = address
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        // A listener whose queue is full (EAGAIN), or a connection still
        // being made (EINPROGRESS), is still a listener.
        return connected == 0 || errno == EAGAIN || errno == EINPROGRESS ? 0 : errno
    }

    /// net.core.somaxconn: listen() silently caps any larger backlog to it.
    static func systemBacklog() -> Int32 {
        guard let file = fopen("/proc/sys/net/core/somaxconn", "r") else { return 4096 }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 32)
        guard fgets(&line, Int32(line.count), file) != nil else { return 4096 }
        let digits = line.prefix { $0 >= 0x30 && $0 <= 0x39 }.map { UInt8(bitPattern: $0) }
        guard let value = Int32(String(decoding: digits, as: UTF8.self)), value > 0 else { return 4096 }
        return value
    }
}

final class RunningLoop: Sendable {
    let loop = Mutex<ServerLoop?>(nil)
}

final class SubordinateIDsBox: Sendable {
    let value: Mutex<SubordinateIDs>
    init(_ ids: SubordinateIDs) { value = Mutex(ids) }
}

/// The socket could not be set up: `description` names the path and the reason.
public struct SocketSetupError: Error, CustomStringConvertible {
    public let path: String
    public let operation: String
    public let errno: Int32
    /// What the error means here, when errno alone would mislead.
    public let reason: String?

    public init(path: String, operation: String, errno: Int32, reason: String? = nil) {
        self.path = path
        self.operation = operation
        self.errno = errno
        self.reason = reason
    }

    public var description: String {
        let cause = String(cString: strerror(errno))
        let explained =
            reason
            ?? (errno == ENOTDIR ? "a part of its directory path is not a directory" : nil)
        return "cannot \(operation) socket \(path): \(explained.map { "\($0) (\(cause))" } ?? cause)"
    }
}

/// The server's loop is not turning: it ended on an error, stopped, or never started.
public struct ServerLoopFailed: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "server loop \(reason)" }
}

extension Duration {
    /// Whole nanoseconds, saturating at Int64's bounds (~292 years) rather than trapping.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        let (sum, past) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return past ? (seconds < 0 ? .min : .max) : sum
    }
}
