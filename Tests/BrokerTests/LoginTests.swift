import Foundation
import Logging
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

    /// Finishes a browser login begun on `h`, the provider having answered the code with `answer`.
    func browserLogin(_ h: Harness, answer: FakeEndpoint.Answer) async throws -> BrokerError? {
        h.endpoint.scriptLogin(answer)
        let ticket = try await h.session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:4000/cb", owner: nil)
        let authorizationURL = try #require(ticket.authorizationURL)
        let url = try #require(URLComponents(string: authorizationURL))
        let state = try #require(url.queryItems?.first { $0.name == "state" }?.value)
        return await #expect(throws: BrokerError.self) {
            try await h.session.finishLogin(id: ticket.id, callbackURL: "http://127.0.0.1:4000/cb?code=c1&state=\(state)", caller: nil)
        }
    }

    @Test(arguments: [
        (TokenEndpointError.refused("token endpoint answered HTTP 400 with an empty body"), "HTTP 400 with an empty body"),
        (.rejected(code: "invalid_client", reason: "token endpoint refused (invalid_client: bad secret)"), "bad secret"),
        (.rejected(code: "invalid_grant", reason: "token endpoint refused (invalid_grant: redirect_uri mismatch)"), "mismatch"),
    ])
    func aRefusedCodeRedemptionFailsTheLogin(_ refusal: TokenEndpointError, _ said: String) async throws {
        let h = try Harness()
        await h.session.start()
        let error = try await browserLogin(h, answer: .error(refusal))
        #expect(error?.code == .loginFailed, "\(String(describing: error))")
        #expect(error?.reason.contains(said) == true)
        #expect(await h.session.status().state == "loginRequired")
    }

    @Test func anUnreachableTokenEndpointStaysUpstreamUnavailable() async throws {
        let h = try Harness()
        await h.session.start()
        let error = try await browserLogin(h, answer: .error(.transient("token endpoint answered HTTP 503", retryAfter: 7)))
        #expect(error?.code == .upstreamUnavailable && error?.retryAfter == 7)
    }

    @Test(arguments: [
        (TokenEndpointError.rejected(code: "invalid_client", reason: "pushed authorization refused (invalid_client)"), true),
        (.rejected(code: "invalid_request", reason: "redirect_uri http://127.0.0.1:4000/cb is not registered"), true),
        (.transient("the pushed authorization request endpoint answered HTTP 503"), false),
    ])
    func aRefusedAuthorizationRequestFailsTheLogin(_ refusal: TokenEndpointError, _ fails: Bool) async throws {
        let directory = NSTemporaryDirectory() + "tokend-broker-\(UUID().uuidString.prefix(8))"
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: RefusingAuthorization(refusal: refusal), file: try StateStore(directory: directory).file(for: "default"),
            clock: TestClock(), logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        await session.start()
        let error = await #expect(throws: BrokerError.self) {
            try await session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:4000/cb", owner: nil)
        }
        #expect(error?.code == (fails ? .loginFailed : .upstreamUnavailable), "\(String(describing: error))")
        #expect(error?.reason.contains(refusal.reason) == true)
        #expect(await session.status().pendingLogins == 0)
    }

    /// A session with redirect-uri takes browser logins only there, and says which command listens there.
    @Test func aBrowserLoginAtAnotherRedirectURIIsRefusedNamingTheSessionsCommand() async throws {
        let directory = NSTemporaryDirectory() + "tokend-broker-\(UUID().uuidString.prefix(8))"
        let refusal = TokenEndpointError.transient("the provider was asked")
        let session = SessionActor(
            name: "portal", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: RefusingAuthorization(refusal: refusal), file: try StateStore(directory: directory).file(for: "portal"),
            clock: TestClock(), logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
            redirectURI: "http://127.0.0.1:8765/callback")
        await session.start()
        let error = await #expect(throws: BrokerError.self) {
            try await session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:4000/cb", owner: nil)
        }
        #expect(error?.code == .invalidCallback)
        #expect(error?.reason.contains("`tokenctl login --session portal --browser` listens there") == true, "\(String(describing: error))")
        // At its own redirect URI the login goes on to the provider.
        let there = await #expect(throws: BrokerError.self) {
            try await session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:8765/callback", owner: nil)
        }
        #expect(there?.reason.contains("the provider was asked") == true)
    }
}

/// A provider that refuses (or cannot take) every authorization request, as a PAR endpoint does.
final class RefusingAuthorization: TokenEndpoint {
    let refusal: TokenEndpointError
    let tokenURL: URL? = URL(string: "https://auth.example.com/oauth/token")!
    init(refusal: TokenEndpointError) { self.refusal = refusal }
    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer { RefreshAnswer(result: .failure(refusal)) }
    func revoke(token: Secret) async throws(TokenEndpointError) {}
    func beginAuthorization(for login: AuthorizationCodeLogin) async throws(TokenEndpointError) -> URL { throw refusal }
}
