import Synchronization
import TokendMetrics

/// All configured sessions, by name.
public final class Broker: Sendable {
    public static let defaultSession = "default"

    private let sessions: Mutex<[String: SessionActor]>

    public init(sessions: [SessionActor]) {
        self.sessions = Mutex(Dictionary(uniqueKeysWithValues: sessions.map { ($0.name, $0) }))
    }

    /// The named session, or "default" when no name is given.
    public func session(_ name: String?) throws(BrokerError) -> SessionActor {
        let name = name ?? Self.defaultSession
        guard let session = sessions.withLock({ $0[name] }) else { throw .noSuchSession(name) }
        return session
    }

    /// The session a login id belongs to ("SESSION/RANDOM"), or NoSuchLogin.
    public func session(forLogin id: String) throws(BrokerError) -> SessionActor {
        guard let name = Self.sessionName(ofLogin: id), let session = sessions.withLock({ $0[name] }) else {
            throw .noSuchLogin(Self.sessionName(ofLogin: id) ?? "", id: id)
        }
        return session
    }

    public static func sessionName(ofLogin id: String) -> String? {
        guard let slash = id.lastIndex(of: "/"), slash != id.startIndex else { return nil }
        return String(id[..<slash])
    }

    /// Registers a session under its name, returning the one it replaces.
    @discardableResult
    public func put(_ session: SessionActor) -> SessionActor? {
        sessions.withLock { $0.updateValue(session, forKey: session.name) }
    }

    public func remove(_ name: String) -> SessionActor? {
        sessions.withLock { $0.removeValue(forKey: name) }
    }

    public var all: [SessionActor] {
        sessions.withLock { $0.values.sorted { $0.name < $1.name } }
    }

    public func startAll() async {
        for session in all { await session.start() }
    }

    /// Graceful stop: in-flight refreshes finish and are persisted.
    public func stopAll() async {
        await withDiscardingTaskGroup { group in
            for session in all { group.addTask { await session.stop() } }
        }
    }
}

extension SessionActor {
    /// Counts a refresh's outcome and how long it took from sending the
    /// request (nil: none was sent) to now, in the session's metrics: the one
    /// call the refresh path makes at each outcome.
    func refreshFinished(_ result: SessionMetrics.RefreshResult, sentAt: ContinuousClock.Instant?) {
        file.metrics.refreshFinished(result, took: sentAt.map { ContinuousClock.now - $0 })
    }
}
