import Logging
import OAuth
import Secrets
import StateStore

extension SessionActor {
    /// The body of the single in-flight refresh. Runs on the actor; clears
    /// `inFlight` before it returns or throws.
    func performRefresh(afterCrash: Bool) async throws -> Token {
        defer {
            inFlight = nil
            reschedule()
        }
        guard record.phase == .active, let refreshToken = record.refreshToken else {
            throw BrokerError.loginRequired(name, record.reason ?? "not logged in")
        }
        let startedAt = clock.now()
        // Record durably that a refresh is about to be sent, so that a crash
        // between the server's answer and our write is recognised at start.
        var marked = record
        marked.refreshStartedAt = Int(startedAt)
        await persist(marked, what: "refresh marker")
        record.refreshStartedAt = marked.refreshStartedAt

        refreshes += 1
        logger.debug("refreshing", metadata: ["generation": "\(record.generation)"])
        do {
            let response = try await endpoint.refresh(refreshToken: refreshToken)
            return await adopt(response, startedAt: startedAt)
        } catch where error.kind == .rejected {
            var reason = error.reason
            if afterCrash {
                reason = "tokend stopped during a refresh and the server then refused the stored refresh token "
                    + "(\(error.code ?? "rejected")); the rotated token was lost. Log in again"
            }
            await requireLogin(reason: reason)
            throw BrokerError.loginRequired(name, reason)
        } catch {
            return try await recordTransientFailure(reason: error.reason, retryAfter: error.retryAfter)
        }
    }

    /// Makes a successful response the session's state: on disk first, then in
    /// memory, then told to subscribers, then returned to callers.
    func adopt(_ response: TokenResponse, startedAt: Double) async -> Token {
        var next = record
        next.generation += 1
        next.accessToken = response.accessToken
        next.tokenType = response.tokenType
        if let rotated = response.refreshToken { next.refreshToken = rotated }
        if let scope = response.scope { next.scope = scope }
        let issuedAt = Int(startedAt)
        if let expiresIn = response.expiresIn {
            next.expiresAt = issuedAt + expiresIn
            next.expirySource = "expires_in"
        } else if let exp = JWT.expiry(of: response.accessToken.reveal()) {
            next.expiresAt = exp
            next.expirySource = "jwt"
        } else {
            next.expiresAt = issuedAt + policy.defaultLifetime
            next.expirySource = "default"
        }
        next.lastRefreshAt = issuedAt
        next.refreshStartedAt = nil
        await persist(next, what: "refreshed state")
        record = next
        backoff.reset()
        lastError = unsavedRecord ? lastError : nil
        logger.info(
            "refreshed",
            metadata: [
                "generation": "\(next.generation)", "expires_at": "\(next.expiresAt!)",
                "rotated": "\(response.refreshToken != nil)",
            ])
        publish(.refreshed)
        return currentToken!
    }

    func recordTransientFailure(reason: String, retryAfter: Int?) async throws -> Token {
        let now = clock.now()
        failures += 1
        lastError = reason
        backoff.recordFailure(now: now, retryAfter: retryAfter, jitter: random())
        logger.warning(
            "refresh failed",
            metadata: [
                "reason": "\(reason)", "failures": "\(backoff.failures)",
                "retry_in": "\(backoff.retryAfter(now: now) ?? 0)",
            ])
        if record.refreshStartedAt != nil {
            var cleared = record
            cleared.refreshStartedAt = nil
            await persist(cleared, what: "refresh marker")
            record.refreshStartedAt = nil
        }
        return try validTokenOrUnavailable(reason, retryAfter: backoff.retryAfter(now: now), now: now)
    }

    /// The grant is gone: erase tokens from memory and disk and tell everyone.
    func requireLogin(reason: String) async {
        let next = SessionRecord(phase: .loginRequired, reason: reason, generation: record.generation)
        record = next
        backoff.reset()
        lastError = reason
        await persist(next, what: "login-required state")
        logger.error("login required", metadata: ["reason": "\(reason)"])
        publish(.loginRequired)
    }

    /// Writes the record durably. A failed write is logged and kept in the
    /// status; the record stays in memory (the server may already have
    /// rotated the token, so dropping it would lose the session) and the write
    /// is retried with the next change.
    func persist(_ next: SessionRecord, what: String) async {
        do {
            try await file.save(next)
            unsavedRecord = false
        } catch {
            unsavedRecord = true
            lastError = "could not save \(what): \(error)"
            logger.critical("state not saved", metadata: ["what": "\(what)", "problem": "\(error)"])
        }
    }

    // MARK: Proactive refresh

    /// Plans the next refresh: at the backoff deadline after failures, before
    /// expiry otherwise, at once when there is no access token yet.
    func reschedule() {
        scheduler?.cancel()
        scheduler = nil
        nextRefreshAt = nil
        guard record.phase == .active, record.refreshToken != nil, inFlight == nil, !stopping else { return }
        let at: Double
        if let retryAt = backoff.nextAttemptAt {
            at = retryAt
        } else if let expiresAt = record.expiresAt, record.accessToken != nil {
            at = policy.proactiveRefreshAt(issuedAt: record.lastRefreshAt, expiresAt: expiresAt, jitter: random())
        } else {
            at = clock.now()
        }
        nextRefreshAt = at
        let clock = self.clock
        scheduler = Task {
            do {
                try await clock.sleep(until: at)
            } catch {
                return
            }
            await self.proactiveRefresh()
        }
    }

    func proactiveRefresh() async {
        scheduler = nil
        guard record.phase == .active, inFlight == nil else { return }
        _ = try? await joinOrStartRefresh(countAsCoalesced: false)
    }
}
