import Foundation
import OAuth
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

/// Device polling (interval, slow_down, expiry, cancel) and the rules around
/// pending logins, with a clock moved by hand.
@Suite struct LoginTests {
    static func pending() -> FakeEndpoint.Answer { .error(.transient("pending", code: "authorization_pending")) }

    /// Moves the clock to `time` once the actor sleeps, then waits for `polls` redemptions.
    func advance(_ h: Harness, to time: Double, expectPolls polls: Int) async throws {
        try await eventually { h.clock.sleeperCount >= 1 }
        h.clock.advance(to: time)
        try await eventually { h.endpoint.redeemed.count >= polls }
    }

    @Test func devicePollingHonoursIntervalAndSlowDown() async throws {
        let h = try Harness()
        await h.session.start()
        h.endpoint.scriptLogin(Self.pending(), .error(.transient("slow", code: "slow_down")), Self.pending())
        let t0 = h.clock.now()
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: 1000)
        #expect(ticket.userCode == "ABCD-EFGH" && ticket.interval == 2 && ticket.expiresAt == Int(t0) + 60)
        let finishing = Task { try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: 1000) }
        try await eventually { h.clock.sleeperCount >= 1 }
        h.clock.advance(to: t0 + 1.9)
        try await Task.sleep(for: .milliseconds(20))
        #expect(h.endpoint.redeemed.isEmpty)  // not before the interval
        try await advance(h, to: t0 + 2, expectPolls: 1)  // pending
        try await advance(h, to: t0 + 4, expectPolls: 2)  // slow_down: interval 2 -> 7
        try await eventually { h.clock.sleeperCount >= 1 }
        h.clock.advance(to: t0 + 10.9)
        try await Task.sleep(for: .milliseconds(20))
        #expect(h.endpoint.redeemed.count == 2)
        try await advance(h, to: t0 + 11, expectPolls: 3)  // pending
        try await advance(h, to: t0 + 18, expectPolls: 4)  // approved
        let status = try await finishing.value
        #expect(status.state == "active" && status.generation == 1 && status.pendingLogins == 0)
        #expect(h.endpoint.redeemed == Array(repeating: "device:device-code", count: 4))
        let stored = try #require(try h.file.load())
        #expect(stored.refreshToken == Secret("login-refresh-4"))
        #expect(try await h.session.getToken(minValidSeconds: nil).accessToken == Secret("login-access-4"))
    }

    @Test func deviceLoginExpiresWithoutApproval() async throws {
        let h = try Harness()
        await h.session.start()
        for _ in 0..<40 { h.endpoint.scriptLogin(Self.pending()) }
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
        let finishing = Task { try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: nil) }
        var time = h.clock.now()
        while time < Double(ticket.expiresAt) {
            try await eventually { h.clock.sleeperCount >= 1 || h.endpoint.redeemed.count >= 29 }
            time += 2
            h.clock.advance(to: time)
        }
        await #expect(throws: BrokerError.login(.loginExpired, "default", "the device code expired before the user approved it")) {
            try await finishing.value
        }
        #expect(h.endpoint.redeemed.count <= 30)
        #expect(await h.session.status().state == "loginRequired")
    }

    @Test func deniedAndRefusedGrantsEndTheLogin() async throws {
        let h = try Harness()
        await h.session.start()
        h.endpoint.scriptLogin(.error(.transient("no", code: "access_denied")))
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
        let finishing = Task { try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: nil) }
        try await advance(h, to: h.clock.now() + 2, expectPolls: 1)
        await #expect(throws: BrokerError.self) { try await finishing.value }
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) {
            try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: nil)
        }
    }

    @Test func noRefreshTokenFailsTheLogin() async throws {
        let h = try Harness()
        await h.session.start()
        h.endpoint.scriptLogin(.token(expiresIn: 600, rotate: false))
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
        let finishing = Task { try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: nil) }
        try await advance(h, to: h.clock.now() + 2, expectPolls: 1)
        do {
            _ = try await finishing.value
            Issue.record("logged in without a refresh token")
        } catch let error as BrokerError {
            #expect(error.code == .loginFailed && error.reason.contains("no refresh token"))
        }
        #expect(try h.file.load() == nil)
    }

    @Test func onlyTheOwnerOrRootFinishesOrCancels() async throws {
        let h = try Harness()
        await h.session.start()
        let ticket = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: 1000)
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) {
            try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: 1001)
        }
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) {
            try await h.session.cancelLogin(id: ticket.id, caller: 1001)
        }
        let finishing = Task { try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: 1000) }
        try await eventually { h.clock.sleeperCount >= 1 }
        // A second FinishLogin while the first polls is refused.
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) {
            try await h.session.finishLogin(id: ticket.id, callbackURL: nil, caller: 1000)
        }
        try await h.session.cancelLogin(id: ticket.id, caller: 0)
        h.clock.advance(to: h.clock.now() + 2)
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) { try await finishing.value }
        #expect(h.endpoint.redeemed.isEmpty)
    }

    @Test func browserLoginChecksStateThenRedeemsOnce() async throws {
        let h = try Harness()
        await h.session.start()
        await #expect(throws: BrokerError.self) {
            try await h.session.beginLogin(flow: .browser, redirectURI: "https://example.com/callback", owner: nil)
        }
        let ticket = try await h.session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:4000/callback", owner: nil)
        let authorizationURL = try #require(ticket.authorizationURL)
        let url = try #require(URLComponents(string: authorizationURL))
        let state = try #require(url.queryItems?.first { $0.name == "state" }?.value)
        let forged = "http://127.0.0.1:4000/callback?code=c1&state=forged"
        await #expect(throws: BrokerError.self) { try await h.session.finishLogin(id: ticket.id, callbackURL: forged, caller: nil) }
        #expect(await h.session.status().pendingLogins == 1)
        #expect(h.endpoint.redeemed.isEmpty)
        let callback = "http://127.0.0.1:4000/callback?code=c1&state=\(state)"
        let status = try await h.session.finishLogin(id: ticket.id, callbackURL: callback, caller: nil)
        #expect(status.state == "active")
        await #expect(throws: BrokerError.noSuchLogin("default", id: ticket.id)) {
            try await h.session.finishLogin(id: ticket.id, callbackURL: callback, caller: nil)
        }
        #expect(h.endpoint.redeemed == ["code:c1"])
    }

    @Test func pendingLoginsAreBounded() async throws {
        let h = try Harness()
        await h.session.start()
        for _ in 0..<SessionActor.maximumPendingLogins {
            _ = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
        }
        await #expect(throws: BrokerError.self) { try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil) }
        h.clock.advance(to: h.clock.now() + 61)  // they expire
        _ = try await h.session.beginLogin(flow: .device, redirectURI: nil, owner: nil)
    }
}
