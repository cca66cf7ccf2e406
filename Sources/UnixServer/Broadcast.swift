import Synchronization
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Replies that many `more` calls receive alike, such as a session's events.
/// The publisher encodes each reply once and hands it to the loop, which
/// writes it to every member's connection: a member costs its connection and
/// a table entry, not a task. What a member is sent on joining comes before
/// anything published after the join (both go through the loop's mailbox, in
/// the order they were made: make them on one actor).
public final class Broadcast: Sendable {
    let loop = Mutex<ServerLoop?>(nil)

    public init() {}

    /// Makes `stream`'s call a member, if the server can hold it: `first` is
    /// written, then everything published from now on, until `finish`.
    /// Returns false when it cannot (the caller then serves the stream itself).
    public func join(_ stream: ReplyStream, first: [VarlinkReply]) -> Bool {
        guard let held = stream.connection as? HeldStream, held.claim() else { return false }
        var bytes: [UInt8] = []
        for reply in first { reply.encode(into: &bytes) }
        loop.withLock { if $0 == nil { $0 = held.loop } }
        held.loop.post(.join(self, bytes), fd: held.fd, connection: held.id)
        return true
    }

    /// Writes `reply` to every member; `delivered` runs (on the loop) once every
    /// member's socket has taken it. A member that is gone counts as served.
    public func publish(_ reply: VarlinkReply, delivered: (@Sendable () -> Void)? = nil) {
        var bytes: [UInt8] = []
        reply.encode(into: &bytes)
        guard let loop = loop.withLock({ $0 }), loop.post(.publish(self, bytes, delivered), fd: -1, connection: 0) else {
            delivered?()
            return
        }
    }

    /// Ends every member's call with `reply` (continues: false); their connections go on.
    public func finish(_ reply: VarlinkReply) {
        var bytes: [UInt8] = []
        reply.encode(into: &bytes)
        loop.withLock({ $0 })?.post(.finish(self, bytes), fd: -1, connection: 0)
    }
}

/// The loop's handle on a `more` call's connection, given to the service with the call.
final class HeldStream: StreamConnection, Sendable {
    let loop: ServerLoop
    let fd: CInt
    let id: UInt64
    private let claimed = Atomic(false)

    init(loop: ServerLoop, fd: CInt, id: UInt64) {
        self.loop = loop
        self.fd = fd
        self.id = id
    }

    /// True once: the call is a broadcast's member from now on.
    func claim() -> Bool { !claimed.exchange(true, ordering: .acquiringAndReleasing) }
    var isClaimed: Bool { claimed.load(ordering: .acquiring) }
}

/// Counts the members yet to take a published reply. Loop thread only.
final class Countdown {
    private var remaining: Int
    private let done: @Sendable () -> Void

    init(_ count: Int, done: @escaping @Sendable () -> Void) {
        remaining = count
        self.done = done
        if count == 0 { done() }
    }

    func tick() {
        remaining -= 1
        if remaining == 0 { done() }
    }
}

/// What waits for bytes to reach a connection's socket.
enum Delivery {
    /// A stream's task, told whether its reply was written.
    case stream(CheckedContinuation<Bool, Never>)
    /// A broadcast's reply: one member fewer to wait for, written or gone.
    case broadcast(Countdown)

    func complete(written: Bool) {
        switch self {
        case .stream(let continuation): continuation.resume(returning: written)
        case .broadcast(let countdown): countdown.tick()
        }
    }
}

extension ServerLoop {
    /// A call becomes a member: its first replies are written, and it stays busy (not read) until the broadcast ends.
    func joined(_ connection: Connection, to broadcast: Broadcast, first: [UInt8]) {
        let key = ObjectIdentifier(broadcast)
        connection.member = key
        members[key, default: [:]][connection.fd] = connection
        metrics?.subscribers.add(1)
        connection.stream = nil
        transmit(first, to: connection, then: nil)
    }

    /// One reply to every member, written where the socket takes it and queued where it does not.
    func published(_ broadcast: Broadcast, reply: [UInt8], delivered: (@Sendable () -> Void)?) {
        let group = members[ObjectIdentifier(broadcast)] ?? [:]
        let countdown = delivered.map { Countdown(group.count, done: $0) }
        for connection in group.values { transmit(reply, to: connection, then: countdown.map { .broadcast($0) }) }
    }

    /// Every member's call ends with `reply`; each connection is read again (the fast path included).
    func finished(_ broadcast: Broadcast, reply: [UInt8]) {
        guard let group = members.removeValue(forKey: ObjectIdentifier(broadcast)) else { return }
        metrics?.subscribers.add(-Double(group.count))
        for connection in group.values {
            connection.member = nil
            answered(connection, replies: reply)
        }
    }

    /// A member whose connection closes leaves its broadcast.
    func leave(_ connection: Connection) {
        guard let key = connection.member else { return }
        connection.member = nil
        if members[key]?.removeValue(forKey: connection.fd) != nil { metrics?.subscribers.add(-1) }
    }
}
