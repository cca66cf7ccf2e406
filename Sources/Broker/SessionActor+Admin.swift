#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CookieJar
import Logging
import OAuth
import Secrets
import StateStore

#if canImport(Glibc)
import Glibc
#endif

extension SessionActor {
    /// Takes a new refresh token (the only way one enters), stores it durably
    /// and refreshes at once to validate it.
    public func login(refreshToken: Secret) async throws -> SessionStatus {
        await settle()
        try await withRefreshTurn { try await fleetExclusive("login") {
            record = SessionRecord(phase: .active, refreshToken: refreshToken, generation: record.generation)
            // A refresh token handed in was granted for what the session asks logins for.
            record.grantResources = keyPolicy.resources
            record.grantResourcesAssumed = true
            backoff.reset()
            lastError = nil
            await persist(what: "login")
        } }
        logger.notice("logged in")
        await publish([event(.loggedIn)], waitForDelivery: false)
        do {
            _ = try await joinOrStartRefresh(countAsCoalesced: false)
        } catch let error as BrokerError where error.code == .upstreamUnavailable {
            // The grant is stored; the scheduler keeps trying.
        }
        return status()
    }

    /// Forgets the session locally (always) and revokes the refresh token at
    /// the server when asked and configured. The local wipe comes first, so it
    /// happens even when the server is unreachable. A DPoP session whose key
    /// cannot sign here (a copy of the state on another machine, a TPM that
    /// does not answer) is forgotten without revoking: the grant may be another
    /// host's, alive there, and a revocation here would end it for that host.
    /// Returns whether the provider took the revocation (false when not asked, or it failed).
    @discardableResult
    public func logout(revoke: Bool) async throws -> Bool {
        await settle()
        let keyProblem = revoke ? await proofKeyUnusableHere() : nil
        let reason = keyProblem.map { Self.notRevokedReason + " (\($0))" } ?? "logged out"
        let (refreshToken, cookieChanges) = try await withRefreshTurn { try await fleetExclusive("logout") {
            let refreshToken = record.refreshToken
            record = SessionRecord(phase: .loggedOut, reason: reason, generation: record.generation)
            backoff.reset()
            lastError = nil
            reschedule()
            let cookieChanges = jar.removeAll()
            countCookieChanges(cookieChanges)
            await persist(what: "logout")
            return (refreshToken, cookieChanges)
        } }
        logger.notice("logged out", metadata: ["revoke": "\(revoke && keyProblem == nil)"])
        await publish(endingEvents(.loggedOut, cookieChanges: cookieChanges), waitForDelivery: true)
        if let keyProblem {
            logger.warning(
                "refresh token not revoked: the session's DPoP key is not usable here, so the provider still holds the grant",
                metadata: ["problem": "\(keyProblem)"])
            return false
        }
        guard revoke, let refreshToken else { return false }
        do {
            try await endpoint.revoke(token: refreshToken)
            return true
        } catch {
            logger.warning("revocation failed", metadata: ["reason": "\(error)"])
            return false
        }
    }

    /// What a logout that was asked to revoke but did not says (status's lastError, tokenctl).
    public static let notRevokedReason =
        "logged out here, not revoked: the session's DPoP key is not usable on this machine, so the provider still holds the grant"

    /// Runs `body` while no refresh of any key can be on its way (a login or
    /// logout replaces the refresh token a refresh would otherwise rotate).
    func withRefreshTurn<T>(_ body: () async throws -> T) async rethrows -> T {
        await refreshTurns.take()
        defer { refreshTurns.pass() }
        return try await body()
    }

    /// Waits until no refresh is in flight (re-checking after each wait).
    func settle() async {
        while let task = inFlight ?? keyedInFlight.values.first {
            _ = try? await task.value
        }
    }

    /// Answers when the actor is responsive (watchdog health check).
    public func ping() {}

    #if TOKEND_TEST_HOOKS
    /// Test builds only: blocks this actor's thread forever, so that the
    /// watchdog health check fails.
    public func hangForTesting() {
        logger.critical("hanging on purpose (TOKEND_TEST_HOOKS)")
        while true { sleep(3600) }
    }
    #endif

    // MARK: Status and events

    public func status() -> SessionStatus {
        var status = sessionStatus()
        let (strategy, reason) = strategyInUse
        status.resources = keyPolicy.resources
        switch status.state {
        case "loginRequired", "loggedOut": status.stateSince = phaseSince.map { Int($0) }
        case "backingOff": status.stateSince = backoff.failingSince.map { Int($0) }
        default: break
        }
        status.webResources = keyPolicy.webResources
        status.strategy = strategy
        status.strategyReason = reason
        status.tokens = keyStatuses
        (status.pageTokens, status.pageTokensReason) = pageTokens
        status.dpop = dpopStatus
        status.loginFlows = endpoint.loginFlows
        return status
    }

    func sessionStatus() -> SessionStatus {
        let now = clock.now()
        let state: String
        switch record.phase {
        case .loginRequired: state = "loginRequired"
        case .loggedOut: state = "loggedOut"
        case .active:
            if inFlight != nil || !keyedInFlight.isEmpty {
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
            failures: failures,
            lastError: lastError ?? discoveryProblem ?? (record.phase == .active ? nil : record.reason),
            cookieCount: jar.cookies.count, cookieVersion: jar.version, subject: record.subject,
            username: record.username, email: record.email, pendingLogins: pendingLogins.count,
            webOrigins: webOrigins, gitHosts: gitHosts, gitUsername: gitUsername, redirectURI: redirectURI,
            hostID: shared?.hostID,
            store: shared == nil ? nil : storeProblem.map { "unavailable: \($0)" } ?? "connected",
            sharedVersion: sharedVersion.map { Int($0) }, fleet: shared?.fleetStatus())
    }

    /// A subscriber through `fanOut` (the server's, shared by every subscriber
    /// of this session): `join` runs here, on the session, with the status and
    /// the catch-up events, so that what it sends the subscriber comes before
    /// any event published after it.
    public func join<Joined: Sendable>(
        through fanOut: EventFanOut, sinceVersion: Int? = nil,
        _ join: @Sendable (SessionStatus, [SessionEvent]) -> Joined
    ) -> Joined {
        self.fanOut = fanOut
        return join(status(), catchUp(sinceVersion: sinceVersion))
    }

    /// The cookie changes made after `sinceVersion`, or a snapshot when the change log does not reach back.
    func catchUp(sinceVersion: Int?) -> [SessionEvent] {
        guard let sinceVersion else { return [] }
        switch jar.changes(since: sinceVersion) {
        case .changes(let missed) where missed.isEmpty:
            return []
        case .changes(let missed):
            return [event(.cookies, changes: missed)]
        case .snapshot(let cookies):
            var snapshot = event(.cookies, changes: cookies.map { CookieChange(action: .set, cookie: $0, version: jar.version) })
            snapshot.snapshot = true
            return [snapshot]
        }
    }

    /// An event describing `state` (the current record unless given).
    func event(_ kind: SessionEvent.Kind, changes: [CookieChange] = [], of state: SessionRecord? = nil) -> SessionEvent {
        let state = state ?? record
        return SessionEvent(
            kind: kind, session: name, generation: state.generation, expiresAt: state.expiresAt,
            reason: state.phase == .active ? nil : state.reason, cookieVersion: jar.version, changes: changes)
    }

    /// A session that ends: its cookie deletions first, then the end itself.
    func endingEvents(_ kind: SessionEvent.Kind, cookieChanges: [CookieChange]) -> [SessionEvent] {
        (cookieChanges.isEmpty ? [] : [event(.cookies, changes: cookieChanges)]) + [event(kind)]
    }

    /// Hands the events to the server's subscribers in order. With
    /// `waitForDelivery`, returns once every subscribed connection has taken
    /// the last of them, or after `deliveryDeadline`.
    func publish(_ events: [SessionEvent], waitForDelivery: Bool) async {
        guard let fanOut, !events.isEmpty else { return }
        guard waitForDelivery else { return fanOut.publish(events, delivered: nil) }
        let receipt = DeliveryReceipt()
        fanOut.publish(events, delivered: { receipt.delivered() })
        await receipt.wait(deadline: deliveryDeadline)
    }
}
