import Broker
import Synchronization
import TokendInterface
import UnixServer
import Varlink

/// A session's subscribers on the server loop: each event is encoded once and
/// handed to one Broadcast, which the loop writes to every subscribed connection.
final class SessionFanOut: EventFanOut {
    let broadcast = Broadcast()
    /// Subscribers through shares: token events only (no cookies, no jar version).
    let tokenEvents = Broadcast()

    func publish(_ events: [SessionEvent], delivered: (@Sendable () -> Void)?) {
        // The last event is delivered once both kinds of subscriber have taken it.
        let both = delivered.map { delivered in
            let left = Atomic(2)
            return { @Sendable in if left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { delivered() } }
        }
        var tokenDelivery = both
        for (index, event) in events.enumerated() {
            let last = index == events.count - 1
            guard let parameters = try? event.memo.value({ try event.wire.parameters() }) else {
                if last {
                    delivered?()
                    return
                }
                continue
            }
            broadcast.publish(VarlinkReply(parameters: parameters, continues: true), delivered: last ? both : nil)
            if parameters["event"]?.stringValue != "cookies" {
                let delivery = last ? tokenDelivery : nil
                if last { tokenDelivery = nil }
                tokenEvents.publish(
                    VarlinkReply(parameters: parameters.filter { !Self.cookieMembers.contains($0.key) }, continues: true),
                    delivered: delivery)
            }
        }
        tokenDelivery?()
    }

    static let cookieMembers: Set<String> = ["version", "changes", "snapshot"]

    func finish(session: String, generation: Int) {
        let stopped = BrokerInterface.Event(event: "stopped", session: session, generation: generation)
        let reply = VarlinkReply(parameters: (try? stopped.parameters()) ?? [:], continues: false)
        broadcast.finish(reply)
        tokenEvents.finish(reply)
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
