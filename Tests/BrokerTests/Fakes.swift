import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Synchronization
import TestSupport
@testable import Broker

/// A clock tests move by hand; sleepers wake when time passes their deadline.
final class TestClock: BrokerClock {
    private struct State {
        var now: Double
        var sleepers: [Int: (deadline: Double, continuation: CheckedContinuation<Void, Error>)] = [:]
        var nextID = 0
    }
    private let state: Mutex<State>

    init(now: Double = 1_000_000) { state = Mutex(State(now: now)) }

    func now() -> Double { state.withLock { $0.now } }

    var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    func sleep(until deadline: Double) async throws {
        let id = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        // As Task.sleep: a sleep cancelled before its deadline throws; one whose deadline came first
        // returns, even if the task is cancelled before it runs again.
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let outcome = state.withLock { s -> Bool? in
                    if Task.isCancelled { return false }
                    if deadline <= s.now { return true }
                    s.sleepers[id] = (deadline, continuation)
                    return nil
                }
                switch outcome {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    func advance(to time: Double) {
        let due = state.withLock { s -> [CheckedContinuation<Void, Error>] in
            s.now = time
            let ready = s.sleepers.filter { $0.value.deadline <= time }
            for id in ready.keys { s.sleepers[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }
}

/// A token endpoint that counts calls, answers from a script and can hold
/// answers back until released.
final class FakeEndpoint: TokenEndpoint {
    enum Answer {
        case token(expiresIn: Int?, rotate: Bool)
        /// A token whose access token is `accessToken` (a JWT, say).
        case access(String, expiresIn: Int?)
        case error(TokenEndpointError)
    }
    private struct State {
        var calls = 0
        var revoked: [String] = []
        var seenRefreshTokens: [String] = []
        var seenCookieHeaders: [String] = []
        var cookieScript: [[String]] = []
        var script: [Answer] = []
        var gate: [CheckedContinuation<Void, Never>] = []
        var held = false
        var loginScript: [Answer] = []
        var redeemed: [String] = []
        var device = (expiresIn: 60, interval: 2)
    }
    private let state = Mutex(State())

    var calls: Int { state.withLock { $0.calls } }
    var seenRefreshTokens: [String] { state.withLock { $0.seenRefreshTokens } }
    var seenCookieHeaders: [String] { state.withLock { $0.seenCookieHeaders } }
    let tokenURL: URL? = URL(string: "https://auth.example.com/oauth/token")!

    /// Set-Cookie headers for the next answers, one list per call.
    func scriptCookies(_ lists: [String]...) { state.withLock { $0.cookieScript += lists } }
    var revoked: [String] { state.withLock { $0.revoked } }
    var waiting: Int { state.withLock { $0.gate.count } }

    func script(_ answers: Answer...) { state.withLock { $0.script += answers } }
    func hold() { state.withLock { $0.held = true } }
    func release() {
        let gate = state.withLock { s in
            s.held = false
            defer { s.gate = [] }
            return s.gate
        }
        for continuation in gate { continuation.resume() }
    }

    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
        let (call, answer, cookies, held) = state.withLock { s in
            s.calls += 1
            s.seenRefreshTokens.append(refreshToken.reveal())
            s.seenCookieHeaders.append(cookieHeader)
            let answer = s.script.isEmpty ? Answer.token(expiresIn: 600, rotate: true) : s.script.removeFirst()
            let cookies = s.cookieScript.isEmpty ? [] : s.cookieScript.removeFirst()
            return (s.calls, answer, cookies, s.held)
        }
        if held {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { s -> Bool in
                    guard s.held else { return true }
                    s.gate.append(continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
        switch answer {
        case .token(let expiresIn, let rotate):
            let response = TokenResponse(
                accessToken: Secret("access-\(call)"), tokenType: "Bearer", expiresIn: expiresIn,
                refreshToken: rotate ? Secret("refresh-\(call)") : nil, scope: "read")
            return RefreshAnswer(result: .success(response), setCookie: cookies)
        case .access(let accessToken, let expiresIn):
            let response = TokenResponse(
                accessToken: Secret(accessToken), tokenType: "Bearer", expiresIn: expiresIn,
                refreshToken: Secret("refresh-\(call)"), scope: "read")
            return RefreshAnswer(result: .success(response), setCookie: cookies)
        case .error(let error):
            return RefreshAnswer(result: .failure(error), setCookie: cookies)
        }
    }

    func revoke(token: Secret) async throws(TokenEndpointError) {
        state.withLock { $0.revoked.append(token.reveal()) }
    }

    // MARK: Logins

    /// Answers for the next login redemptions (device polls, code exchanges).
    func scriptLogin(_ answers: Answer...) { state.withLock { $0.loginScript += answers } }
    /// The grants redeemed so far: "device:CODE" or "code:CODE".
    var redeemed: [String] { state.withLock { $0.redeemed } }

    /// What the next device authorizations say their code's lifetime and poll interval are.
    func scriptDevice(expiresIn: Int, interval: Int) { state.withLock { $0.device = (expiresIn, interval) } }

    func deviceAuthorization() async throws(TokenEndpointError) -> DeviceAuthorization {
        let device = state.withLock { $0.device }
        return DeviceAuthorization(
            deviceCode: Secret("device-code"), userCode: "ABCD-EFGH", verificationURI: "https://auth.example.com/device",
            verificationURIComplete: nil, expiresIn: device.expiresIn, interval: device.interval)
    }

    func authorizationURL(for login: AuthorizationCodeLogin) throws(TokenEndpointError) -> URL {
        login.authorizationURL(endpoint: URL(string: "https://auth.example.com/authorize")!, clientID: "c", scope: "openid")!
    }

    func redeem(_ grant: LoginGrant, cookieHeader: String) async -> RefreshAnswer {
        let (call, answer) = state.withLock { s in
            switch grant {
            case .deviceCode(let code): s.redeemed.append("device:\(code.reveal())")
            case .authorizationCode(let code, _): s.redeemed.append("code:\(code.reveal())")
            }
            return (s.redeemed.count, s.loginScript.isEmpty ? Answer.token(expiresIn: 600, rotate: true) : s.loginScript.removeFirst())
        }
        switch answer {
        case .token(let expiresIn, let rotate):
            let response = TokenResponse(
                accessToken: Secret("login-access-\(call)"), tokenType: "Bearer", expiresIn: expiresIn,
                refreshToken: rotate ? Secret("login-refresh-\(call)") : nil, scope: "openid")
            return RefreshAnswer(result: .success(response))
        case .access(let accessToken, let expiresIn):
            let response = TokenResponse(
                accessToken: Secret(accessToken), tokenType: "Bearer", expiresIn: expiresIn,
                refreshToken: Secret("login-refresh-\(call)"), scope: "openid")
            return RefreshAnswer(result: .success(response))
        case .error(let error):
            return RefreshAnswer(result: .failure(error))
        }
    }
}

/// A session actor over a temporary state directory.
struct Harness {
    let clock = TestClock()
    let endpoint = FakeEndpoint()
    let file: SessionFile
    let session: SessionActor

    init(policy: RefreshPolicy = RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300)) throws {
        let directory = NSTemporaryDirectory() + "tokend-broker-\(UUID().uuidString.prefix(8))"
        file = try StateStore(directory: directory).file(for: "default")
        session = SessionActor(
            name: "default", policy: policy, endpoint: endpoint, file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 })
    }

    /// State as a process leaves it when killed between sending a refresh and saving its answer.
    func storeRecordInterruptedMidRefresh() throws {
        try file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"),
                expiresAt: Int(clock.now()) + 500, generation: 7, refreshStartedAt: Int(clock.now()) - 2))
    }

    /// An active session whose access token has expired.
    func expiredSession(generation: Int = 3) async throws {
        try file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"), tokenType: "Bearer",
                expiresAt: Int(clock.now()) - 1, expirySource: "expires_in", generation: generation,
                lastRefreshAt: Int(clock.now()) - 601))
        await session.start()
    }
}

/// The server's side of Subscribe as the broker sees it (SessionFanOut in
/// tokend): each member's stream gets the status-time catch-up and then
/// every event, in order. Delivery is reported at once, as the server loop
/// does once the events are written, unless `holdsDelivery`: then only
/// `deliver()` reports it (a slow or stuck client).
final class TestFanOut: EventFanOut {
    private struct State {
        var members: [AsyncStream<SessionEvent>.Continuation] = []
        var pending: [@Sendable () -> Void] = []
        var finished = false
    }
    private let state = Mutex(State())
    let holdsDelivery: Bool

    init(holdsDelivery: Bool = false) { self.holdsDelivery = holdsDelivery }

    /// Joins `session` through this fan-out (the one Subscribe path): the
    /// stream starts with what the subscriber missed since `sinceVersion`.
    func subscribe(_ session: SessionActor, sinceVersion: Int? = nil) async -> AsyncStream<SessionEvent> {
        await session.join(through: self, sinceVersion: sinceVersion) { _, catchUp in
            let (stream, continuation) = AsyncStream<SessionEvent>.makeStream()
            for event in catchUp { continuation.yield(event) }
            state.withLock { $0.members.append(continuation) }
            return stream
        }
    }

    func publish(_ events: [SessionEvent], delivered: (@Sendable () -> Void)?) {
        let members = state.withLock { $0.members }
        for member in members {
            for event in events { member.yield(event) }
        }
        guard let delivered else { return }
        if holdsDelivery { state.withLock { $0.pending.append(delivered) } } else { delivered() }
    }

    /// Reports every held delivery (the subscriber has taken the events).
    func deliver() {
        for delivered in state.withLock({ state in defer { state.pending = [] }; return state.pending }) { delivered() }
    }

    func finish(session: String, generation: Int) {
        let members = state.withLock { state in
            state.finished = true
            return state.members
        }
        for member in members { member.finish() }
    }
}
