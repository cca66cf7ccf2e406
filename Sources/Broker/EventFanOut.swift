/// Where a session's events go to the server's subscribers: one hand-off per
/// event for all of them (the server writes it to every subscribed connection),
/// rather than one stream per subscriber.
public protocol EventFanOut: AnyObject, Sendable {
    /// Hands the events on, in order; `delivered` runs once every subscriber
    /// has taken the last of them (one that is gone counts as served).
    func publish(_ events: [SessionEvent], delivered: (@Sendable () -> Void)?)
    /// The session stops: every subscriber's stream ends.
    func finish(session: String, generation: Int)
}
