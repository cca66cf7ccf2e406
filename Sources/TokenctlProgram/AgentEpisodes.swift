/// One notification per episode: from a session's entering loginRequired to
/// its being usable again. Pure bookkeeping, told each session's state as it
/// is found and which notification was posted for it; it answers what to post
/// and what to close.
struct AgentEpisodes: Sendable {
    enum Step: Equatable, Sendable {
        /// Post the session's notification (then call `posted`).
        case post(session: String)
        /// Close the session's notification: its episode is over.
        case close(id: UInt32)
    }

    private struct Episode {
        /// nil until Notify answered, and for an episode seen at the agent's
        /// start by a user who cannot end it (it is not announced).
        var notification: UInt32?
    }

    private var episodes: [String: Episode] = [:]

    /// `state` is the session's (SessionStatus.state); `announce` false: an
    /// episode that began before the agent watched, for a user who may not sign
    /// the session in: kept, not posted.
    mutating func observe(session: String, state: String, announce: Bool = true) -> Step? {
        if state == "loginRequired" {
            guard episodes[session] == nil else { return nil }  // the same episode: a failed or abandoned login
            episodes[session] = Episode()
            return announce ? .post(session: session) : nil
        }
        // Active, refreshing, backing off, logged out or gone: the episode is over.
        guard let ended = episodes.removeValue(forKey: session) else { return nil }
        return ended.notification.map { .close(id: $0) }
    }

    /// Notify answered `id` for `session`'s notification. When the episode
    /// ended while it was being posted, the answer is to close it at once.
    mutating func posted(session: String, id: UInt32) -> Step? {
        guard episodes[session] != nil else { return .close(id: id) }
        episodes[session]?.notification = id
        return nil
    }

    /// The session whose open episode notification `id` belongs to.
    func session(of id: UInt32) -> String? {
        episodes.first { $0.value.notification == id }?.key
    }

    func notification(of session: String) -> UInt32? { episodes[session]?.notification }

    /// Every notification posted and not yet closed.
    var posted: [UInt32] { episodes.values.compactMap(\.notification).sorted() }
}
