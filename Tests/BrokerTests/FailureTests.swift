import OAuth
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

@Suite struct FailureTests {
    @Test func invalidGrantReachesWaitersAndSubscribersAndErasesTheToken() async throws {
        let h = try Harness()
        h.endpoint.script(.error(.rejected(code: "invalid_grant", reason: "token endpoint refused the refresh (invalid_grant)")))
        h.endpoint.hold()
        let events = await TestFanOut().subscribe(h.session)
        try await h.expiredSession()
        let results = try await withThrowingTaskGroup(of: Error?.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    do {
                        _ = try await h.session.getToken(minValidSeconds: nil)
                        return nil
                    } catch { return error }
                }
            }
            try await eventually { h.endpoint.waiting == 1 }
            h.endpoint.release()
            return try await group.reduce(into: [Error?]()) { $0.append($1) }
        }
        for error in results {
            #expect((error as? BrokerError)?.code == .loginRequired)
        }
        var iterator = events.makeAsyncIterator()
        let event = await iterator.next()
        #expect(event?.kind == .loginRequired)
        #expect(event?.reason?.contains("invalid_grant") == true)
        let stored = try #require(try h.file.load())
        #expect(stored.phase == .loginRequired)
        #expect(stored.refreshToken == nil && stored.accessToken == nil)
        #expect(await h.session.status().state == "loginRequired")
        #expect(h.endpoint.calls == 1)
    }

    @Test func transientFailuresBackOffAndCallersAddNoUpstreamCalls() async throws {
        let h = try Harness()
        h.endpoint.script(
            .error(.transient("token endpoint answered HTTP 503", retryAfter: nil)),
            .error(.transient("token endpoint answered HTTP 503", retryAfter: nil)))
        try await h.expiredSession()
        try await eventually { h.endpoint.calls == 1 }
        try await eventually { await h.session.status().state == "backingOff" }
        // No valid token: callers get UpstreamUnavailable with a retry hint and cause no calls.
        for _ in 0..<50 {
            do {
                _ = try await h.session.getToken(minValidSeconds: nil)
                Issue.record("expected UpstreamUnavailable")
            } catch let error as BrokerError {
                #expect(error.code == .upstreamUnavailable)
                #expect(error.retryAfter == 1)
            }
        }
        _ = try? await h.session.refresh(staleGeneration: nil)
        #expect(h.endpoint.calls == 1)
        // The scheduler retries at the backoff deadline: 1 s × 1.0 (jitter 0.5).
        h.clock.advance(to: h.clock.now() + 1)
        try await eventually { h.endpoint.calls == 2 }
        try await eventually { await h.session.status().failures == 2 }
        h.clock.advance(to: h.clock.now() + 2)
        try await eventually { h.endpoint.calls == 3 }
        let token = try await h.session.getToken(minValidSeconds: nil)
        #expect(token.generation == 4)
        #expect(await h.session.status().state == "active")
    }

    @Test func validTokenIsServedWhileBackingOff() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let good = try await h.session.getToken(minValidSeconds: nil)
        h.endpoint.script(.error(.transient("timeout", retryAfter: 120)))
        let forced = try await h.session.refresh(staleGeneration: nil)
        #expect(forced == good)
        #expect(try await h.session.getToken(minValidSeconds: 599) == good)
        #expect(h.endpoint.calls == 2)
        #expect(await h.session.status().nextRefreshAt == Int(h.clock.now()) + 120)
    }

    @Test func crashDuringRefreshIsRetriedOnceThenLoginRequiredNamesTheCrash() async throws {
        let h = try Harness()
        try h.storeRecordInterruptedMidRefresh()
        h.endpoint.script(.error(.rejected(code: "invalid_grant", reason: "refused")))
        await h.session.start()
        try await eventually { await h.session.status().state == "loginRequired" }
        #expect(h.endpoint.calls == 1)
        let reason = await h.session.status().lastError ?? ""
        #expect(reason.contains("stopped during a refresh"))
    }

    @Test func crashDuringRefreshRecoversInsideGraceWindow() async throws {
        let h = try Harness()
        try h.storeRecordInterruptedMidRefresh()
        await h.session.start()
        try await eventually { await h.session.status().generation == 8 }
        #expect(try h.file.load()?.refreshStartedAt == nil)
    }

    @Test func logoutWipesLocallyAndRevokes() async throws {
        let h = try Harness()
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        let events = await TestFanOut().subscribe(h.session)
        try await h.session.logout(revoke: true)
        #expect(h.endpoint.revoked == ["refresh-1"])
        #expect(try h.file.load()?.refreshToken == nil)
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next()?.kind == .loggedOut)
        await #expect(throws: BrokerError.self) { try await h.session.getToken(minValidSeconds: nil) }
    }

    @Test func loginStoresTokenAndRefreshesOnce() async throws {
        let h = try Harness()
        await h.session.start()
        await #expect(throws: BrokerError.self) { try await h.session.getToken(minValidSeconds: nil) }
        let status = try await h.session.login(refreshToken: Secret("fresh"))
        #expect(status.state == "active")
        #expect(status.generation == 1)
        #expect(h.endpoint.seenRefreshTokens == ["fresh"])
    }
}

@Suite struct PolicyTests {
    @Test func backoffDoublesToFiveMinutesAndHonoursRetryAfter() {
        var backoff = Backoff()
        var delays: [Double] = []
        for _ in 0..<12 {
            backoff.recordFailure(now: 0, retryAfter: nil, jitter: 0.5)
            delays.append(backoff.nextAttemptAt!)
        }
        #expect(delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300])
        backoff.recordFailure(now: 0, retryAfter: 900, jitter: 0)
        #expect(backoff.nextAttemptAt == 900)
        backoff.recordFailure(now: 0, retryAfter: 999_999, jitter: 0)
        #expect(backoff.nextAttemptAt == 3600)
        var jittered = Backoff()
        jittered.recordFailure(now: 0, retryAfter: nil, jitter: 0)
        #expect(jittered.nextAttemptAt == 0.8)
        jittered.reset()
        #expect(!jittered.isWaiting(now: 0))
    }

    @Test func proactiveRefreshLeadsExpiryByMarginOrHalfLifetime() {
        let policy = RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300)
        #expect(policy.proactiveRefreshAt(issuedAt: 0, expiresAt: 3600, jitter: 0) == 3540)
        #expect(policy.proactiveRefreshAt(issuedAt: 0, expiresAt: 3600, jitter: 1) == 3534)
        #expect(policy.proactiveRefreshAt(issuedAt: 0, expiresAt: 20, jitter: 0) == 10)
    }

    @Test func proactiveRefreshHappensBeforeExpiry() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let first = try await h.session.getToken(minValidSeconds: nil)
        #expect(h.endpoint.calls == 1)
        try await eventually { h.clock.sleeperCount == 1 }
        h.clock.advance(to: Double(first.expiresAt) - 65)
        #expect(h.endpoint.calls == 1)
        h.clock.advance(to: Double(first.expiresAt) - 60)
        try await eventually { h.endpoint.calls == 2 }
        try await eventually { await h.session.status().generation == first.generation + 1 }
    }
}

@Suite struct ShutdownTests {
    @Test func stopFinishesTheRefreshInFlightAndStartsNoNewOne() async throws {
        let h = try Harness()
        h.endpoint.hold()
        try await h.expiredSession()
        try await eventually { h.endpoint.waiting == 1 }
        async let stopped: Void = h.session.stop()
        h.endpoint.release()
        await stopped
        #expect(try h.file.load()?.generation == 4, "the in-flight refresh was persisted")
        _ = try await h.session.refresh(staleGeneration: nil)  // served the valid token, no new call
        #expect(h.endpoint.calls == 1)
    }
}
