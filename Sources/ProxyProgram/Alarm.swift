import NIOCore

/// One timer for a connection's deadlines, on its loop. Moving a
/// deadline later costs nothing (the timer, when it goes off early, is set
/// again for the deadline as it then stands); only a deadline earlier than the
/// one the timer is set for sets it again. A connection that serves requests
/// back to back thus arms no timer per request.
final class Alarm {
    private unowned let loop: ProxyLoop
    private var armed: (at: NIODeadline, timer: TimerHeap.ID)?
    /// Its connection is closed: nothing is timed any more, and no timer is left behind for it.
    private var retired = false
    /// Called when the timer goes off: checks the deadlines and answers the next one, or nil for none.
    var check: () -> NIODeadline? = { nil }

    init(on loop: ProxyLoop) { self.loop = loop }

    /// The earliest deadline is now `deadline` or later: the timer goes off no later than it.
    func ensure(_ deadline: NIODeadline) {
        if retired { return }
        if let armed, armed.at <= deadline { return }
        if let armed { loop.cancel(armed.timer) }
        let timer = loop.schedule(at: deadline) { [weak self] in self?.fire() }
        armed = (deadline, timer)
    }

    /// For good: the connection is closed (what closes it may still set a deadline, which is ignored).
    func retire() {
        retired = true
        if let armed { loop.cancel(armed.timer) }
        armed = nil
        check = { nil }
    }

    private func fire() {
        armed = nil
        if let next = check() { ensure(next) }
    }
}
