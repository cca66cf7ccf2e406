import OAuth
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

@Suite struct SingleFlightTests {
    @Test func thousandConcurrentCallersCauseOneUpstreamRefresh() async throws {
        let h = try Harness()
        h.endpoint.hold()
        try await h.expiredSession()
        let tokens = try await withThrowingTaskGroup(of: Token.self) { group in
            for _ in 0..<1000 {
                group.addTask { try await h.session.getToken(minValidSeconds: nil) }
            }
            try await eventually { h.endpoint.waiting == 1 }
            // Let the callers pile up on the one in-flight refresh.
            try await Task.sleep(for: .milliseconds(200))
            h.endpoint.release()
            return try await group.reduce(into: [Token]()) { $0.append($1) }
        }
        #expect(h.endpoint.calls == 1)
        #expect(Set(tokens.map(\.accessToken)) == [Secret("access-1")])
        #expect(tokens.allSatisfy { $0.generation == 4 })
        let status = await h.session.status()
        #expect(status.refreshes == 1)
        #expect(status.coalesced >= 999)
    }

    @Test func cachedTokenIsServedWithoutUpstreamCalls() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let first = try await h.session.getToken(minValidSeconds: nil)
        for _ in 0..<100 { #expect(try await h.session.getToken(minValidSeconds: nil) == first) }
        #expect(h.endpoint.calls == 1)
    }

    @Test func minValidBeyondRemainingLifeRefreshes() async throws {
        let h = try Harness()
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)  // expires in 600 s
        h.clock.advance(to: h.clock.now() + 250)  // 350 s left
        _ = try await h.session.getToken(minValidSeconds: 200)
        #expect(h.endpoint.calls == 1)
        // Asking for more than half the lifetime is capped at half (300 s): 350 s left suffices.
        _ = try await h.session.getToken(minValidSeconds: 10_000)
        #expect(h.endpoint.calls == 1)
        h.clock.advance(to: h.clock.now() + 100)  // 250 s left < 300 s
        let token = try await h.session.getToken(minValidSeconds: 10_000)
        #expect(h.endpoint.calls == 2)
        #expect(token.generation == 5)
    }

    @Test func staleGenerationGetsCurrentTokenWithoutUpstreamCall() async throws {
        let h = try Harness()
        try await h.expiredSession(generation: 3)
        let fresh = try await h.session.getToken(minValidSeconds: nil)
        #expect(fresh.generation == 4)
        let again = try await h.session.refresh(staleGeneration: 3)
        #expect(again == fresh)
        #expect(h.endpoint.calls == 1)
        let forced = try await h.session.refresh(staleGeneration: 4)
        #expect(forced.generation == 5)
        let unconditional = try await h.session.refresh(staleGeneration: nil)
        #expect(unconditional.generation == 6)
        #expect(h.endpoint.calls == 3)
    }
}

@Suite struct RotationAndDurabilityTests {
    @Test func adoptsRotatedTokenAndKeepsOldOneOtherwise() async throws {
        let h = try Harness()
        h.endpoint.script(.token(expiresIn: 600, rotate: true), .token(expiresIn: 600, rotate: false), .token(expiresIn: 600, rotate: true))
        try await h.expiredSession()
        _ = try await h.session.refresh(staleGeneration: nil)
        _ = try await h.session.refresh(staleGeneration: nil)
        _ = try await h.session.refresh(staleGeneration: nil)
        #expect(h.endpoint.seenRefreshTokens == ["refresh-0", "refresh-1", "refresh-1"])
        #expect(try h.file.load()?.refreshToken == Secret("refresh-3"))
    }

    @Test func stateIsOnDiskBeforeCallersSeeTheToken() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let token = try await h.session.getToken(minValidSeconds: nil)
        let stored = try #require(try h.file.load())
        #expect(stored.generation == token.generation)
        #expect(stored.accessToken == token.accessToken)
        #expect(stored.refreshToken == Secret("refresh-1"))
        #expect(stored.refreshStartedAt == nil)
    }

    @Test func refreshInFlightIsMarkedOnDisk() async throws {
        let h = try Harness()
        h.endpoint.hold()
        try await h.expiredSession()
        try await eventually { h.endpoint.waiting == 1 }
        #expect(try h.file.load()?.refreshStartedAt != nil)
        h.endpoint.release()
        _ = try await h.session.getToken(minValidSeconds: nil)
        #expect(try h.file.load()?.refreshStartedAt == nil)
    }

    @Test func expiryComesFromDefaultWhenServerIsSilent() async throws {
        let h = try Harness()
        h.endpoint.script(.token(expiresIn: nil, rotate: true))
        try await h.expiredSession()
        let token = try await h.session.getToken(minValidSeconds: nil)
        #expect(token.expiresAt == Int(h.clock.now()) + 300)
        #expect(await h.session.status().expirySource == "default")
    }
}

@Suite struct TransientStampedeTests {
    /// The token is still valid but inside min-valid; the one refresh fails
    /// transiently. Every caller gets the still-valid token and nobody adds an
    /// upstream call until the backoff deadline.
    @Test func transientFailureUnderStampedeCausesNoExtraCalls() async throws {
        let h = try Harness()
        h.endpoint.script(.error(.transient("token endpoint answered HTTP 500")))
        try h.file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"), tokenType: "Bearer",
                expiresAt: Int(h.clock.now()) + 3, expirySource: "expires_in", generation: 1,
                lastRefreshAt: Int(h.clock.now()) - 9))
        await h.session.start()
        let tokens = try await withThrowingTaskGroup(of: Token.self) { group in
            for _ in 0..<1000 { group.addTask { try await h.session.getToken(minValidSeconds: nil) } }
            return try await group.reduce(into: [Token]()) { $0.append($1) }
        }
        #expect(h.endpoint.calls == 1)
        #expect(Set(tokens.map(\.accessToken)) == [Secret("old")])
    }
}
