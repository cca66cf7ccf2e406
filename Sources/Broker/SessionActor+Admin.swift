import Foundation
import Logging
import OAuth
import Secrets
import StateStore

extension SessionActor {
    /// Takes a new refresh token (the only way one enters), stores it durably
    /// and refreshes at once to validate it.
    public func login(refreshToken: Secret) async throws -> SessionStatus {
        await settle()
        record = SessionRecord(phase: .active, refreshToken: refreshToken, generation: record.generation)
        backoff.reset()
        lastError = nil
        await persist(record, what: "login")
        logger.notice("logged in")
        publish(.loggedIn)
        do {
            _ = try await joinOrStartRefresh(countAsCoalesced: false)
        } catch let error as BrokerError where error.code == .upstreamUnavailable {
            // The grant is stored; the scheduler keeps trying.
        }
        return status()
    }

    /// Forgets the session locally (always) and revokes the refresh token at
    /// the server when asked and configured. The local wipe comes first, so it
    /// happens even when the server is unreachable.
    public func logout(revoke: Bool) async {
        await settle()
        let refreshToken = record.refreshToken
        record = SessionRecord(phase: .loggedOut, reason: "logged out", generation: record.generation)
        backoff.reset()
        lastError = nil
        reschedule()
        await persist(record, what: "logout")
        logger.notice("logged out", metadata: ["revoke": "\(revoke)"])
        publish(.loggedOut)
        guard revoke, let refreshToken else { return }
        do {
            try await endpoint.revoke(token: refreshToken)
        } catch {
            logger.warning("revocation failed", metadata: ["reason": "\(error)"])
        }
    }

    /// Waits until no refresh is in flight (re-checking after each wait).
    func settle() async {
        while let inFlight {
            _ = try? await inFlight.value
        }
    }

    /// Answers when the actor is responsive (watchdog health check).
    public func ping() {}

    /// Test-only: blocks this actor's thread forever, so that the watchdog
    /// health check fails. Reached only when TOKEND_TEST_HOOKS=1.
    public func hangForTesting() {
        logger.critical("hanging on purpose (TOKEND_TEST_HOOKS)")
        while true { sleep(3600) }
    }

    // MARK: Status and events

    public func status() -> SessionStatus {
        let now = clock.now()
        let state: String
        switch record.phase {
        case .loginRequired: state = "loginRequired"
        case .loggedOut: state = "loggedOut"
        case .active:
            if inFlight != nil {
                state = "refreshing"
            } else if backoff.isWaiting(now: now) {
                state = "backingOff"
            } else {
                state = "active"
            }
        }
        return SessionStatus(
            session: name, state: state, generation: record.generation, expiresAt: record.expiresAt,
            expirySource: record.expirySource, lastRefreshAt: record.lastRefreshAt,
            nextRefreshAt: nextRefreshAt.map { Int($0) }, refreshes: refreshes, coalesced: coalesced,
            failures: failures, lastError: lastError ?? (record.phase == .active ? nil : record.reason))
    }

    /// Events from now on, until the session stops or the consumer goes away.
    /// A consumer that falls more than 64 events behind loses the oldest.
    public func subscribe() -> AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream<SessionEvent>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = nextSubscriberID
        nextSubscriberID += 1
        subscribers[id] = continuation
        continuation.onTermination = { _ in
            Task { await self.unsubscribe(id) }
        }
        return stream
    }

    func unsubscribe(_ id: Int) {
        subscribers[id] = nil
    }

    func publish(_ kind: SessionEvent.Kind) {
        let event = SessionEvent(
            kind: kind, session: name, generation: record.generation, expiresAt: record.expiresAt,
            reason: record.phase == .active ? nil : record.reason)
        for continuation in subscribers.values { continuation.yield(event) }
    }
}
