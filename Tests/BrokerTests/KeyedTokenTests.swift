import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Synchronization
import Testing
@testable import Broker

/// A provider with rotation, reuse detection and RFC 8707 resources, in
/// either behaviour the issue names: a refresh naming resources narrows the
/// new refresh token to them (django-oauth-toolkit), or keeps it wide and
/// issues one resource per token (Entra ID).
final class ResourceProvider: TokenEndpoint {
    enum Behaviour { case narrows, keepsWide }
    struct Grant {
        var resources: [String]
        var used = false
    }
    private struct State {
        var grants: [String: Grant] = [:]
        var audiences: [String: [String]] = [:]
        var calls = 0
        var inFlight = 0
        var mostInFlight = 0
        var revoked = false
        var refusals: Set<String> = []
        var grantRefusals: Set<String> = []
        var failing = false
        var statesAudience = true
        var targets: [RefreshTarget] = []
    }
    private let state = Mutex(State())
    let behaviour: Behaviour
    let tokenURL: URL? = URL(string: "https://auth.example.com/token")

    init(_ behaviour: Behaviour, resources: [String]) {
        self.behaviour = behaviour
        state.withLock { $0.grants["rt-0"] = Grant(resources: resources) }
    }

    var calls: Int { state.withLock { $0.calls } }
    var mostInFlight: Int { state.withLock { $0.mostInFlight } }
    var revoked: Bool { state.withLock { $0.revoked } }
    var targets: [RefreshTarget] { state.withLock { $0.targets } }
    /// Resources this provider refuses to issue tokens for (invalid_target), whatever the grant says.
    func refuse(_ resource: String) { _ = state.withLock { $0.refusals.insert(resource) } }
    func audience(of token: Token) -> [String] { state.withLock { $0.audiences[token.accessToken.reveal()] ?? [] } }
    /// Resources this provider refuses with invalid_grant (consent or MFA missing for that API, as Entra answers).
    func refuseGrant(for resource: String) { _ = state.withLock { $0.grantRefusals.insert(resource) } }
    /// Every refresh fails as an unreachable endpoint would, while set.
    func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
    /// Whether the provider says (as introspection does) what a token's audience is.
    func statesAudience(_ says: Bool) { state.withLock { $0.statesAudience = says } }

    /// As an introspection endpoint: the resources the token was issued for.
    func audience(of accessToken: Secret) async -> AudienceReading {
        state.withLock { s in
            guard s.statesAudience, let audience = s.audiences[accessToken.reveal()] else { return .unknown("opaque") }
            return .stated(audience, source: "introspection")
        }
    }

    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
        await refresh(refreshToken: refreshToken, cookieHeader: cookieHeader, target: RefreshTarget(scope: nil))
    }

    func refresh(refreshToken: Secret, cookieHeader: String, target: RefreshTarget) async -> RefreshAnswer {
        state.withLock { s in
            s.calls += 1
            s.inFlight += 1
            s.mostInFlight = max(s.mostInFlight, s.inFlight)
            s.targets.append(target)
        }
        try? await Task.sleep(for: .milliseconds(2))
        return state.withLock { s -> RefreshAnswer in
            defer { s.inFlight -= 1 }
            let presented = refreshToken.reveal()
            if s.failing { return RefreshAnswer(result: .failure(.transient("connection refused"))) }
            guard var grant = s.grants[presented], !s.revoked else { return Self.error("invalid_grant") }
            if target.resources.contains(where: s.grantRefusals.contains) { return Self.error("invalid_grant", "consent required") }
            guard !grant.used else {
                s.revoked = true
                return Self.error("invalid_grant")
            }
            if let refused = target.resources.first(where: s.refusals.contains) {
                return Self.error("invalid_target", "\(refused) refused")
            }
            guard target.resources.allSatisfy(grant.resources.contains) else { return Self.error("invalid_target") }
            let asked = target.resources.isEmpty ? grant.resources : target.resources
            let audience: [String]
            switch behaviour {
            case .narrows:
                audience = asked
                grant.resources = asked
            case .keepsWide:
                guard asked.count <= 1 || target.resources.isEmpty else { return Self.error("invalid_target", "one resource per token") }
                audience = Array(asked.prefix(1))
            }
            s.grants[presented]?.used = true
            let next = "rt-\(s.calls)"
            s.grants[next] = Grant(resources: grant.resources)
            let access = "at-\(s.calls)"
            s.audiences[access] = audience
            return RefreshAnswer(
                result: .success(
                    TokenResponse(
                        accessToken: Secret(access), tokenType: "Bearer", expiresIn: 600, refreshToken: Secret(next),
                        scope: target.scope ?? "read write")))
        }
    }

    func revoke(token: Secret) async throws(TokenEndpointError) {}

    static func error(_ code: String, _ description: String? = nil) -> RefreshAnswer {
        let reason = "token endpoint answered 400 with error \(code)\(description.map { ": \($0)" } ?? "")"
        return RefreshAnswer(
            result: .failure(code == "invalid_grant" ? .rejected(code: code, reason: reason) : .transient(reason, code: code)))
    }
}

@Suite struct KeyedTokenTests {
    static let resources = (1...10).map { "https://api-\($0).example.com/" }
    /// A session with a valid token of its own (so nothing refreshes it at start).
    static let loggedIn: SessionRecord = {
        var record = SessionRecord(
            phase: .active, refreshToken: Secret("rt-0"), accessToken: Secret("session-token"), tokenType: "Bearer",
            expiresAt: 1_000_000 + 3600, generation: 1, lastRefreshAt: 1_000_000)
        record.grantResources = resources
        return record
    }()

    func session(_ provider: ResourceProvider, clock: TestClock = TestClock(), resources: [String] = resources)
        async throws -> SessionActor
    {
        try await Self.session(provider, clock: clock, resources: resources).session
    }

    /// A logged-in session on `endpoint` with the resources, and its state file.
    static func session(_ endpoint: any TokenEndpoint, clock: TestClock = TestClock(), resources: [String] = resources)
        async throws -> (session: SessionActor, file: SessionFile)
    {
        let directory = NSTemporaryDirectory() + "tokend-keys-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        try await file.save(Self.loggedIn)
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: endpoint, file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: KeyPolicy(resources: resources, scope: "read write"))
        return (session, file)
    }

    /// Every key asked for by `askers` callers at once; returns each key's tokens.
    func stampede(_ session: SessionActor, askers: Int) async throws -> [String: [Token]] {
        try await withThrowingTaskGroup(of: (String, Token).self) { group in
            for resource in Self.resources {
                for _ in 0..<askers {
                    group.addTask {
                        let key = try await session.key(resource: resource, scope: nil)
                        return (resource, try await session.getToken(minValidSeconds: nil, key: key))
                    }
                }
            }
            var tokens: [String: [Token]] = [:]
            for try await (resource, token) in group { tokens[resource, default: []].append(token) }
            return tokens
        }
    }

    /// Against a provider that narrows (and, like django-oauth-toolkit, revokes
    /// the access token of a rotated refresh token), the session's one token
    /// serves every resource: one refresh for all. Against one that keeps
    /// refresh tokens wide, each resource has its own: one refresh each.
    @Test(arguments: [ResourceProvider.Behaviour.narrows, .keepsWide])
    func tenResourcesAHundredAskersEachCostOneRefreshEachOneAtATime(behaviour: ResourceProvider.Behaviour) async throws {
        let provider = ResourceProvider(behaviour, resources: Self.resources)
        let clock = TestClock()
        let session = try await session(provider, clock: clock)
        await session.start()
        // The first ask for a resource learns how the provider behaves: the session's
        // refresh asks for all of them at once (refused one-resource-per-token: then its own).
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.resources[0], scope: nil))
        let learning = provider.calls
        #expect(learning == (behaviour == .narrows ? 1 : 3))
        let expected = behaviour == .narrows ? "shared-audience" : "per-resource"
        #expect(await session.status().strategy == expected)

        let first = try await stampede(session, askers: 100)
        #expect(provider.calls == learning + (behaviour == .narrows ? 0 : 9))
        // At expiry: every key again.
        clock.advance(to: clock.now() + 700)
        let before = provider.calls
        let second = try await stampede(session, askers: 100)
        if behaviour == .narrows {
            #expect(provider.calls == before + 1)
        } else {
            // One per resource (the session's own token, expired too, may be refreshed besides).
            #expect(provider.targets[before...].filter { $0.resources.count == 1 }.count == 10)
            #expect(provider.calls <= before + 11)
        }
        #expect(provider.mostInFlight == 1)
        #expect(!provider.revoked)
        for resource in Self.resources {
            let tokens = try #require(second[resource])
            #expect(Set(tokens.map(\.accessToken)).count == 1)
            #expect(provider.audience(of: tokens[0]).contains(resource))
            #expect(tokens[0].resource == resource)
            #expect(first[resource]![0].generation + 1 == tokens[0].generation)
        }
        let status = await session.status()
        #expect(status.tokens.count == (behaviour == .narrows ? 0 : 10))
        // Never a refresh that named fewer than all resources on a narrowing provider: the grant stays whole.
        if behaviour == .narrows {
            #expect(provider.targets.allSatisfy { $0.resources == Self.resources })
        }
    }

    @Test func aResourceTheLoginDidNotAskForIsRefusedUntilTheNextLogin() async throws {
        let provider = ResourceProvider(.narrows, resources: Self.resources)
        let directory = NSTemporaryDirectory() + "tokend-keys-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        var record = Self.loggedIn
        record.grantResources = Array(Self.resources.prefix(2))
        try await file.save(record)
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: provider, file: file, clock: TestClock(),
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: KeyPolicy(resources: Self.resources, scope: "read write"))
        await session.start()
        do {
            _ = try await session.key(resource: Self.resources[2], scope: nil)
            Issue.record("a resource outside the grant was accepted")
        } catch let error as BrokerError {
            #expect(error.code == .resourceNotAllowed)
            #expect(error.reason.contains("log in again"))
        }
        // The granted ones are asked for together, never the configured list.
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.resources[1], scope: nil))
        #expect(provider.targets.map(\.resources) == [Array(Self.resources.prefix(2))])
    }

    @Test func aResourceOutsideTheListIsRefusedWithoutAnUpstreamCall() async throws {
        let provider = ResourceProvider(.narrows, resources: Self.resources)
        let session = try await session(provider)
        await session.start()
        await #expect(throws: BrokerError.self) { _ = try await session.key(resource: "https://other.example.com/", scope: nil) }
        do {
            _ = try await session.key(resource: nil, scope: "read admin")
            Issue.record("a scope beyond the session's was accepted")
        } catch let error as BrokerError {
            #expect(error.code == .scopeNotAllowed)
            #expect(error.reason.contains("admin"))
        }
        // The session's whole scope is the session's own token.
        #expect(try await session.key(resource: nil, scope: "write read") == .session)
        #expect(provider.calls == 0)
    }

    @Test func invalidTargetFailsThatKeyOnly() async throws {
        let provider = ResourceProvider(.keepsWide, resources: Self.resources)
        let session = try await session(provider)
        await session.start()
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.resources[0], scope: nil))
        provider.refuse(Self.resources[1])
        let refused = try await session.key(resource: Self.resources[1], scope: nil)
        do {
            _ = try await session.getToken(minValidSeconds: nil, key: refused)
            Issue.record("a refused resource got a token")
        } catch let error as BrokerError {
            #expect(error.code == .targetRefused)
            #expect(error.resource == Self.resources[1])
        }
        let calls = provider.calls
        // Asked again at once: answered from memory.
        await #expect(throws: BrokerError.self) { _ = try await session.getToken(minValidSeconds: nil, key: refused) }
        #expect(provider.calls == calls)
        let other = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.resources[2], scope: nil))
        #expect(provider.audience(of: other) == [Self.resources[2]])
        let status = await session.status()
        #expect(status.state == "active")
        #expect(status.tokens.first { $0.resource == Self.resources[1] }?.lastError?.contains("invalid_target") == true)
    }

    @Test func invalidGrantForAKeyEndsTheSession() async throws {
        let provider = ResourceProvider(.keepsWide, resources: Self.resources)
        let session = try await session(provider)
        await session.start()
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.resources[0], scope: nil))
        // Another client replays a used refresh token: the provider revokes the family.
        _ = await provider.refresh(refreshToken: Secret("rt-0"), cookieHeader: "", target: RefreshTarget(scope: nil))
        #expect(provider.revoked)
        let key = try await session.key(resource: Self.resources[3], scope: nil)
        do {
            _ = try await session.getToken(minValidSeconds: nil, key: key)
            Issue.record("a revoked grant gave a token")
        } catch let error as BrokerError {
            #expect(error.code == .loginRequired)
        }
        #expect(await session.status().state == "loginRequired")
        #expect(await session.status().tokens.isEmpty)
    }

    @Test func keyedTokensAndTheStrategySurviveARestart() async throws {
        let provider = ResourceProvider(.keepsWide, resources: Self.resources)
        let directory = NSTemporaryDirectory() + "tokend-keys-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        try await file.save(Self.loggedIn)
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        func make() -> SessionActor {
            SessionActor(
                name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
                endpoint: provider, file: file, clock: TestClock(), logger: logger, random: { 0.5 },
                keys: KeyPolicy(resources: Self.resources, scope: "read write"))
        }
        let first = make()
        await first.start()
        let token = try await first.getToken(minValidSeconds: nil, key: first.key(resource: Self.resources[4], scope: nil))
        await first.stop()
        let second = make()
        await second.start()
        let calls = provider.calls
        let again = try await second.getToken(minValidSeconds: nil, key: second.key(resource: Self.resources[4], scope: nil))
        #expect(again == token)
        #expect(provider.calls == calls)
        #expect(await second.status().strategy == "per-resource")
        #expect(second.cachedTokenAndLife(minValidSeconds: nil, key: TokenKey(resource: Self.resources[4]))?.token == token)
    }

    @Test func aSessionKeepsAtMostItsNumberOfKeys() async throws {
        let provider = ResourceProvider(.keepsWide, resources: Self.resources)
        let directory = NSTemporaryDirectory() + "tokend-keys-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        try await file.save(Self.loggedIn)
        let clock = TestClock()
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: provider, file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: KeyPolicy(resources: Self.resources, scope: "read write", maximumKeys: 3))
        await session.start()
        for resource in Self.resources.prefix(5) {
            clock.advance(to: clock.now() + 1)
            _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: resource, scope: nil))
        }
        let held = await session.status().tokens.compactMap(\.resource)
        #expect(held == Array(Self.resources[2..<5]).sorted())
    }
}
