import Foundation
import Secrets
import StateStore
import Testing
@testable import Broker

/// A provider's lifetimes are outside numbers: none of them, however large,
/// negative or absurd, may trap, and what was stored loads again.
@Suite struct LifetimeTests {
    static let year = SessionRecord.maximumLifetime

    @Test func aHugeExpiresInIsClampedToAYearAndSaidInStatus() async throws {
        let h = try Harness()
        h.endpoint.script(.token(expiresIn: 10_000_000_000_000, rotate: true))
        try await h.expiredSession()
        let token = try await h.session.getToken(minValidSeconds: nil)
        #expect(token.expiresAt == Int(h.clock.now()) + Self.year)
        let status = await h.session.status()
        #expect(status.expirySource == "expires_in")
        #expect(status.lastError?.contains("expires_in (10000000000000 s) exceeds 366 days") == true, "\(status)")
        #expect(try h.file.load()?.expiresAt == token.expiresAt)
        // The next, sane answer clears the note.
        _ = try await h.session.refresh(staleGeneration: nil)
        #expect(await h.session.status().lastError == nil)
    }

    @Test(arguments: [Int.max, Int.max - 1, Int.min, -1, 0])
    func anAbsurdExpiresInNeverTraps(expiresIn: Int) async throws {
        let h = try Harness()
        h.endpoint.script(.token(expiresIn: expiresIn, rotate: true))
        try await h.expiredSession()
        let token = try await h.session.getToken(minValidSeconds: nil)
        let now = Int(h.clock.now())
        // Above a year: a year. Zero or less is no lifetime: the default (300 s) applies.
        #expect(token.expiresAt == now + (expiresIn > 0 ? Self.year : 300))
        #expect(await h.session.status().lastError != nil)
        #expect(h.session.cachedToken(minValidSeconds: nil) == token)
    }

    @Test(arguments: [1e300, -1e300, 1e19, 10_000_000_000_000.0])
    func aJWTExpOfAnySizeIsClamped(exp: Double) async throws {
        let h = try Harness()
        h.endpoint.script(.access(Self.jwt(exp: exp), expiresIn: nil))
        try await h.expiredSession()
        let token = try await h.session.getToken(minValidSeconds: nil)
        let now = Int(h.clock.now())
        #expect(token.expiresAt == now + (exp > 0 ? Self.year : 300))
        #expect(await h.session.status().lastError?.contains("JWT exp") == true)
    }

    @Test func aStoredRecordThatOnceCrashedLoadsClamped() async throws {
        let h = try Harness()
        let now = Int(h.clock.now())
        try h.file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"), tokenType: "Bearer",
                expiresAt: Int.max - 5, expirySource: "expires_in", generation: 3, lastRefreshAt: now))
        let loaded = try #require(try h.file.load())
        #expect(loaded.expiresAt == now + Self.year)
        #expect(loaded.lifetimeNote?.contains("stored expiry") == true)
        await h.session.start()
        let token = try await h.session.getToken(minValidSeconds: 10_000_000)
        #expect(token.expiresAt == now + Self.year && h.endpoint.calls == 0)
        #expect(await h.session.status().lastError?.contains("stored expiry") == true)
        #expect(await h.session.status().nextRefreshAt != nil)
    }

    /// A generation no tokend wrote (Int.max trapped `generation += 1` at the
    /// first refresh, and again after every restart) loads clamped and counts on.
    @Test(arguments: [Int.max, Int.max - 1])
    func aStoredGenerationNearIntMaxStillRefreshes(generation: Int) async throws {
        let h = try Harness()
        h.endpoint.script(.token(expiresIn: 600, rotate: true))
        try await h.expiredSession(generation: generation)
        _ = try await h.session.getToken(minValidSeconds: nil)
        // Stored one above the clamped value, and loaded again as that: never back.
        #expect(try h.file.load()?.generation == SessionRecord.clampedCounterValue + 1)
    }

    @Test func storedTimesOutsideAnyCalendarAreHeldToIt() throws {
        let h = try Harness()
        try h.file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"),
                expiresAt: Int.min, generation: 1, lastRefreshAt: Int.max, refreshStartedAt: Int.min))
        let loaded = try #require(try h.file.load())
        #expect(loaded.lastRefreshAt == SessionRecord.latestTime)
        #expect(loaded.refreshStartedAt == 0 && loaded.expiresAt == 0)
    }

    @Test func aDeviceLoginsNumbersAreHeldToWhatALoginCanUse() async throws {
        let h = try Harness()
        await h.session.start()
        h.endpoint.scriptDevice(expiresIn: Int.max, interval: Int.max)
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
        #expect(ticket.expiresAt == Int(h.clock.now()) + SessionActor.longestDeviceLogin)
        #expect(ticket.interval == SessionActor.longestPollInterval)
    }

    /// An unsigned JWT whose payload's exp is `exp` (JSON keeps the number as written).
    static func jwt(exp: Double) -> String {
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        }
        let number = exp == exp.rounded() && abs(exp) < 1e18 ? String(Int64(exp)) : "\(exp)"
        return "\(b64(#"{"alg":"none"}"#)).\(b64("{\"exp\":\(number)}")).sig"
    }
}
