import CLinux
import Logging
import Synchronization
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
    /// What one client may hold. Every limit is in tokend.toml(5).
    public struct Limits: Sendable {
        public var maximumFrameLength = 1 << 20
        /// Connections served at once; more are answered `overloadedError` and closed.
        public var maximumConnections = 512
        /// Connections one uid (not an admin) may hold.
        public var maximumConnectionsPerUser = 256
        /// Slots beyond `maximumConnections` that only admins may take, so
        /// that a caller holding every slot cannot lock out Login and Logout.
        public var adminConnections = 16
        /// A connection with no call in progress and no data for this long is closed.
        public var idleTimeout = Duration.seconds(300)
        /// Bytes of messages begun and not finished that one uid's
        /// connections may hold together (slow senders cannot pile up memory).
        public var maximumUnfinishedBytesPerUser = 4 << 20
        /// A message not finished this long after its first byte closes the connection.
        public var frameTimeout = Duration.seconds(10)
        /// Replies the client does not read for this long (socket buffer and
        /// the write buffer full) close the connection.
        public var writeTimeout = Duration.seconds(30)
        /// Outbound bytes buffered per connection before the loop stops reading it.
        public var writeBufferHighWatermark = 64 * 1024
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
        /// Shares the slots, at most `maximumConnectionsPerUser` of them per uid.
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
    /// The running loop, for `ping`.
    let running = RunningLoop()

    /// What the server itself answers, outside any method.
    struct Errors: Sendable {
        let oversized: VarlinkError
        let overloaded: VarlinkError
        let malformed = VarlinkError.invalidParameter("message")
        let upgrade = VarlinkError.invalidParameter("upgrade")
    }

    public init(
        service: VarlinkService, source: ListenSource, limits: Limits = Limits(), logger: Logger,
        oversizedFrameError: VarlinkError = .invalidParameter("message"),
        overloadedError: VarlinkError = VarlinkError("org.varlink.service.InternalError"),
        fastPath: FastPath? = nil, fastPathStamp: @escaping FastPathStamp = { 0 }, admission: Admission? = nil
    ) {
        self.fastPath = fastPath
        self.fastPathStamp = fastPathStamp
        self.admission = admission
        self.service = service
        self.source = source
        self.limits = limits
        self.logger = logger
        self.errors = Errors(oversized: oversizedFrameError, overloaded: overloadedError)
    }

    /// Binds (or adopts) the socket; `onListening` runs once it accepts
    /// connections. Returns when the task is cancelled or the loop fails.
    public func run(onListening: @Sendable () async -> Void = {}) async throws {
        let listener: CInt
        switch source {
        case .path(let path, let mode): listener = try Self.listen(path: path, mode: mode)
        case .fileDescriptor(let fd): listener = fd
        }
        let (ended, endedContinuation) = AsyncStream<Void>.makeStream()
        let loop: ServerLoop
        do {
            loop = try ServerLoop(
                listener: listener, limits: limits, errors: errors, fastPath: fastPath, fastPathStamp: fastPathStamp,
                admission: admission,
                service: service, logger: logger, ended: { endedContinuation.finish() })
        } catch {
            close(listener)
            throw error
        }
        loop.start()
        running.loop.withLock { $0 = loop }
        await onListening()
        await withTaskCancellationHandler {
            for await _ in ended {}
        } onCancel: {
            loop.stop()
        }
    }

    /// Returns once the server's loop has come round (at once if it is not
    /// running); never, if it is stuck.
    public func ping() async {
        await running.loop.withLock { $0 }?.ping()
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
        if lstat(path, &existing) == 0, existing.st_mode & S_IFMT == S_IFSOCK {
            guard !answers(address) else { throw SocketSetupError(path: path, operation: "bind", errno: EADDRINUSE) }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
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

    /// Something accepts connections at `address`: a socket that answers is
    /// never unlinked, whoever owns it.
    static func answers(_ address: sockaddr_un) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = address
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
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

public struct SocketSetupError: Error, CustomStringConvertible {
    public let path: String
    public let operation: String
    public let errno: Int32
    public var description: String { "\(operation) \(path): \(String(cString: strerror(errno)))" }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
