import CSystemd
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Synchronization

/// What the desktop's notification server says to the agent.
enum BusSignal: Sendable, Equatable {
    /// The user chose `action` on notification `id`.
    case actionInvoked(id: UInt32, action: String)
    /// The notification is gone: 1 expired, 2 dismissed by the user, 3 closed by a call, 4 other.
    case notificationClosed(id: UInt32, reason: UInt32)
}

struct BusError: Error, CustomStringConvertible {
    /// The D-Bus error the peer answered ("org.freedesktop.DBus.Error.ServiceUnknown"); nil for a local failure.
    let name: String?
    let description: String

    init(name: String? = nil, _ description: String) {
        self.name = name
        self.description = description
    }

    /// sd-bus's negative errno, in words.
    init(_ what: String, code: Int32) {
        self.init("\(what): \(String(cString: strerror(-code)))")
    }
}

/// The user's session bus through sd-bus (libsystemd). sd-bus is not
/// thread-safe, so one thread owns the connection: calls are handed to it
/// (`perform`) and run between its waits, and the signals it matches are
/// read there and passed on through `signals`.
final class AgentBus: @unchecked Sendable {
    private struct Queue {
        var jobs: [@Sendable (OpaquePointer) -> Void] = []
        var closed = false
    }

    private let bus: OpaquePointer
    /// A socket pair whose write end wakes the bus thread when a job is queued.
    private let wake: (read: Int32, write: Int32)
    private let queue = Mutex(Queue())
    private let sink: SignalSink
    let signals: AsyncStream<BusSignal>

    /// Connects to $DBUS_SESSION_BUS_ADDRESS (else $XDG_RUNTIME_DIR/bus) and
    /// asks the bus for its id, so that a bus that does not answer is found now.
    static func connectSession() throws(BusError) -> AgentBus {
        var opened: OpaquePointer?
        let code = sd_bus_open_user(&opened)
        guard code >= 0, let bus = opened else { throw BusError("cannot connect to the session bus", code: code) }
        do {
            _ = try BusMessage.call(
                bus, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetId", timeout: 5_000_000, append: { _ throws(BusError) in }, read: { reply throws(BusError) in try reply.readString("s") })
        } catch {
            sd_bus_flush_close_unref(bus)
            throw error
        }
        // One agent per desktop session: the unit and the autostart entry may both start one.
        let named = sd_bus_request_name(bus, wellKnownName, 0)
        guard named >= 0 else {
            sd_bus_flush_close_unref(bus)
            if named == -EEXIST {
                throw BusError(name: alreadyRunning, "another tokenctl agent runs on this session bus (it owns \(wellKnownName))")
            }
            throw BusError("cannot own \(wellKnownName) on the session bus", code: named)
        }
        return try AgentBus(bus)
    }

    /// The name the agent owns on the session bus while it runs.
    static let wellKnownName = "io.tokend.Agent"
    /// BusError.name when another agent owns it.
    static let alreadyRunning = "io.tokend.Agent.AlreadyRunning"

    private init(_ bus: OpaquePointer) throws(BusError) {
        self.bus = bus
        var ends: [Int32] = [-1, -1]
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &ends) == 0 else { throw BusError("cannot make a socket pair", code: -errno) }
        wake = (ends[0], ends[1])
        (signals, sink) = SignalSink.make()
        let match = sd_bus_match_signal(
            bus, nil, "org.freedesktop.Notifications", "/org/freedesktop/Notifications", "org.freedesktop.Notifications",
            nil, { message, userdata, _ in
                guard let message, let userdata else { return 0 }
                Unmanaged<SignalSink>.fromOpaque(userdata).takeUnretainedValue().handle(BusMessage(message))
                return 0
            }, Unmanaged.passUnretained(sink).toOpaque())
        guard match >= 0 else { throw BusError("cannot listen to the notification server's signals", code: match) }
        detachThread(named: "session bus") { [self] in serve() }
    }

    /// Runs `body` on the bus thread; throws when the connection has ended.
    func perform<T: Sendable>(_ body: @escaping @Sendable (OpaquePointer) throws(BusError) -> T) async throws(BusError) -> T {
        let result: Result<T, BusError> = await withCheckedContinuation { continuation in
            let queued = queue.withLock { queue in
                guard !queue.closed else { return false }
                queue.jobs.append { bus in continuation.resume(returning: Result { () throws(BusError) in try body(bus) }) }
                return true
            }
            if queued {
                var one: UInt8 = 1
                _ = write(wake.write, &one, 1)
            } else {
                continuation.resume(returning: .failure(BusError("the session bus connection has ended")))
            }
        }
        return try result.get()
    }

    /// The bus thread: queued calls, then what arrived, then a wait for either.
    private func serve() {
        while true {
            let jobs = queue.withLock { queue in
                defer { queue.jobs = [] }
                return queue.jobs
            }
            for job in jobs { job(bus) }
            var processed: Int32
            repeat { processed = sd_bus_process(bus, nil) } while processed > 0
            if processed < 0 { break }
            var fds = [
                pollfd(fd: sd_bus_get_fd(bus), events: Int16(truncatingIfNeeded: sd_bus_get_events(bus)), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            _ = poll(&fds, 2, waitMilliseconds())
            var drained = [UInt8](repeating: 0, count: 64)
            while read(wake.read, &drained, drained.count) > 0 {}
        }
        let left = queue.withLock { queue in
            queue.closed = true
            defer { queue.jobs = [] }
            return queue.jobs
        }
        for job in left { job(bus) }  // each fails on the closed connection
        sink.finish()
    }

    /// Until sd-bus's next timeout (a call's, an authentication's), or forever.
    private func waitMilliseconds() -> Int32 {
        var until: UInt64 = 0
        guard sd_bus_get_timeout(bus, &until) >= 0, until != UInt64.max else { return -1 }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        guard until > nowMicroseconds else { return 0 }
        return Int32(min((until - nowMicroseconds + 999) / 1000, 60_000))
    }
}

/// Receives matched signals on the bus thread and hands them to the agent.
final class SignalSink: Sendable {
    private let continuation: AsyncStream<BusSignal>.Continuation

    private init(_ continuation: AsyncStream<BusSignal>.Continuation) { self.continuation = continuation }

    static func make() -> (AsyncStream<BusSignal>, SignalSink) {
        let (stream, continuation) = AsyncStream.makeStream(of: BusSignal.self)
        return (stream, SignalSink(continuation))
    }

    func handle(_ message: BusMessage) {
        switch message.member {
        case "ActionInvoked":
            if let id = try? message.readUInt32(), let action = try? message.readString("s") {
                continuation.yield(.actionInvoked(id: id, action: action))
            }
        case "NotificationClosed":
            if let id = try? message.readUInt32(), let reason = try? message.readUInt32() {
                continuation.yield(.notificationClosed(id: id, reason: reason))
            }
        default:
            break
        }
    }

    func finish() { continuation.finish() }
}
