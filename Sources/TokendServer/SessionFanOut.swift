import Broker
import Synchronization
import TokendInterface
import UnixServer
import Varlink

/// A session's subscribers on the server loop: each event is encoded once and
/// handed to one Broadcast, which the loop writes to every subscribed connection.
final class SessionFanOut: EventFanOut {
    let broadcast = Broadcast()

    func publish(_ events: [SessionEvent], delivered: (@Sendable () -> Void)?) {
        for (index, event) in events.enumerated() {
            let last = index == events.count - 1
            guard let parameters = try? event.memo.value({ try event.wire.parameters() }) else {
                if last { delivered?() }
                continue
            }
            broadcast.publish(VarlinkReply(parameters: parameters, continues: true), delivered: last ? delivered : nil)
        }
    }

    func finish(session: String, generation: Int) {
        let stopped = BrokerInterface.Event(event: "stopped", session: session, generation: generation)
        broadcast.finish(VarlinkReply(parameters: (try? stopped.parameters()) ?? [:], continues: false))
    }

    /// What a subscriber is sent on joining: the state the events start from, then what it missed.
    static func first(_ status: SessionStatus, catchUp: [SessionEvent]) throws -> [VarlinkReply] {
        var event = BrokerInterface.Event(event: "status", session: status.session, generation: status.generation)
        event.expiresAt = status.expiresAt
        event.reason = status.lastError
        event.version = status.cookieVersion
        return try [VarlinkReply(parameters: event.parameters(), continues: true)]
            + catchUp.map { VarlinkReply(parameters: try $0.wire.parameters(), continues: true) }
    }
}

/// One fan-out per session name, made when the session's first subscriber comes.
final class FanOuts: Sendable {
    private let table = Mutex<[String: SessionFanOut]>([:])

    func of(_ session: String) -> SessionFanOut {
        table.withLock { table in
            if let known = table[session] { return known }
            let made = SessionFanOut()
            table[session] = made
            return made
        }
    }
}
