import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Testing
@testable import Broker

/// Security round four in the session actor: what a token covers is its
/// audience as the provider says it (else the whole grant), keys cost their
/// maker, and the strategy is learnt only from answers that cannot mislead.
@Suite struct AudienceTests {
    static let (a, b, c, d) = ("https://a.example.com/", "https://b.example.com/", "https://c.example.com/", "https://d.example.com/")

    /// A logged-in session over `provider`, its record as `record` says (a
    /// valid token of its own, so nothing refreshes it at start).
    func session(
        _ provider: ResourceProvider, resources: [String], grant: [String]? = nil, handedIn: Bool = false,
        clock: TestClock = TestClock(), keys: (KeyPolicy) -> KeyPolicy = { $0 }
    ) async throws -> SessionActor {
        let directory = NSTemporaryDirectory() + "tokend-audience-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        var record = SessionRecord(
            phase: .active, refreshToken: Secret("rt-0"), accessToken: Secret("session-token"), tokenType: "Bearer",
            expiresAt: 1_000_000 + 3600, generation: 1, lastRefreshAt: 1_000_000)
        record.grantResources = grant ?? resources
        record.grantResourcesAssumed = handedIn
        try await file.save(record)
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: provider, file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: keys(KeyPolicy(resources: resources, scope: "read write")))
        await session.start()
        return session
    }

    @Test func aTokenCoversWhatTheProviderConfirmsElseTheWholeGrant() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b])
        let session = try await session(provider, resources: [Self.a, Self.b], keys: {
            var policy = $0
            policy.narrowing = .keepsWide
            return policy
        })
        // The stored token came from nobody's answer: it covers both.
        #expect(try await session.getToken(minValidSeconds: nil).audience == [Self.a, Self.b])
        let forB = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.b, scope: nil))
        #expect(forB.audience == [Self.b], "introspection confirms b alone")
        // A resource-less refresh gets the provider's default audience: the first resource, as it says.
        let own = try await session.refresh(staleGeneration: nil)
        #expect(provider.audience(of: own) == [Self.a])
        #expect(own.audience == [Self.a])
        // An opaque token nobody introspects covers every resource: fail closed.
        provider.statesAudience(false)
        let opaque = try await session.refresh(staleGeneration: nil)
        #expect(opaque.audience == [Self.a, Self.b])
        #expect(session.cachedTokenAndLife(minValidSeconds: nil)?.token.audience == [Self.a, Self.b])
    }

    @Test func anAudienceValueNamingNoResourceFailsClosedAndConfiguredAliasesMap() {
        let resources = [Self.a, Self.b]
        let aliases = [Self.b: ["api://b"]]
        #expect(SessionActor.resources(named: ["api://b"], among: resources, audiences: aliases) == [Self.b])
        #expect(SessionActor.resources(named: [Self.a, "api://b"], among: resources, audiences: aliases) == [Self.a, Self.b])
        #expect(SessionActor.resources(named: [Self.a, "account"], among: resources, audiences: aliases) == nil)
        #expect(SessionActor.resources(named: [], among: resources, audiences: aliases) == nil, "an empty audience says nothing")
    }

    @Test func aGrantThatCarriesResourcesTheConfigurationNoLongerListsStillCoversThem() async throws {
        let provider = ResourceProvider(.narrows, resources: [Self.a, Self.b])
        let session = try await session(provider, resources: [], grant: [Self.a, Self.b])
        #expect(try await session.getToken(minValidSeconds: nil).audience == [Self.a, Self.b])
    }

    @Test func aReaderPastItsShareOfKeysIsRefusedAndNobodyElsesKeysGo() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b, Self.c, Self.d])
        let clock = TestClock()
        let session = try await session(provider, resources: [Self.a, Self.b, Self.c, Self.d], clock: clock, keys: {
            var policy = $0
            policy.narrowing = .keepsWide
            policy.maximumKeys = 3
            policy.keysPerPerson = 2
            return policy
        })
        let (mallory, alice) = (UInt32(1001), UInt32(1000))
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a), person: alice)
        for (index, resource) in [Self.b, Self.c].enumerated() {
            clock.advance(to: clock.now() + Double(index + 1))
            _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: resource), person: mallory)
        }
        let calls = provider.calls
        // Mallory holds two keys, her share: a third one is refused, not made by evicting alice's.
        let error = await #expect(throws: BrokerError.self) {
            _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.d), person: mallory)
        }
        #expect(error?.code == .tooManyKeys)
        #expect(error?.limit == 2)
        #expect(provider.calls == calls, "no upstream call for a refused key")
        // So does a scope the session does not hold yet.
        await #expect(throws: BrokerError.self) {
            _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a, scope: "read"), person: mallory)
        }
        #expect(Set(await session.status().tokens.compactMap(\.resource)) == [Self.a, Self.b, Self.c])
        // Keys she holds are still hers to use.
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.b), person: mallory)
        #expect(provider.calls == calls)
    }

    @Test func theSessionFullEvictsOnlyTheAskersOwnKeys() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b, Self.c, Self.d])
        let clock = TestClock()
        let session = try await session(provider, resources: [Self.a, Self.b, Self.c, Self.d], clock: clock, keys: {
            var policy = $0
            policy.narrowing = .keepsWide
            policy.maximumKeys = 2
            return policy
        })
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a), person: 1000)
        clock.advance(to: clock.now() + 1)
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.b), person: 1001)
        clock.advance(to: clock.now() + 1)
        // 1001 asks for a third: its own b goes, not 1000's older a.
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.c), person: 1001)
        #expect(Set(await session.status().tokens.compactMap(\.resource)) == [Self.a, Self.c])
        // 1002 holds nothing to give up: refused, and the others keep theirs.
        await #expect(throws: BrokerError.self) {
            _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.d), person: 1002)
        }
        #expect(Set(await session.status().tokens.compactMap(\.resource)) == [Self.a, Self.c])
    }

    @Test func newKeysCostABudgetThatRefillsWithTime() {
        var budget = KeyBudget(capacity: 3, perMinute: 4)
        for _ in 0..<3 { #expect(budget.take(for: 7, now: 100) == nil) }
        #expect(budget.take(for: 7, now: 100) == 15, "one more in 15 s at 4 a minute")
        #expect(budget.take(for: 8, now: 100) == nil, "another person's budget is its own")
        #expect(budget.take(for: 7, now: 115) == nil)
        #expect(budget.take(for: 7, now: 115) != nil)
    }

    @Test func aHandedInGrantMissingAResourceIsNotTakenForPerResourceAndNothingNarrowsIt() async throws {
        // django-oauth-toolkit's behaviour; the refresh token handed in covers a only, tokend.toml lists a and b.
        let provider = ResourceProvider(.narrows, resources: [Self.a])
        let session = try await session(provider, resources: [Self.a, Self.b], handedIn: true)
        let token = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.a, scope: nil))
        #expect(token.audience == [Self.a])
        let status = await session.status()
        #expect(status.strategy == "shared-audience", "\(status.strategyReason)")
        // The probe, a refresh naming none (its token covers a alone), then b alone: refused, so the grant is {a}.
        #expect(provider.targets.map(\.resources) == [[Self.a, Self.b], [], [Self.b]])
        // A reader's narrower scope is the session's own token; b is refused without asking.
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: nil, scope: "read"))
        await #expect(throws: BrokerError.self) {
            _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.b, scope: nil))
        }
        #expect(provider.targets.count == 3)
        #expect(provider.targets.allSatisfy { $0.scope == "read write" }, "no refresh asked for less than the whole scope")
        // The session's own refreshes go on, for everyone, asking for the grant it has.
        let again = try await session.refresh(staleGeneration: nil)
        #expect(again.generation > token.generation)
        #expect(provider.targets.last?.resources == [Self.a])
        #expect(!provider.revoked)
    }

    @Test func aHandedInGrantAtAProviderThatKeepsItWideIsLearntPerResource() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b])
        let session = try await session(provider, resources: [Self.a, Self.b], handedIn: true)
        let forB = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.b, scope: nil))
        #expect(await session.status().strategy == "per-resource")
        #expect(forB.audience == [Self.b])
        #expect(provider.audience(of: forB) == [Self.b])
        #expect(provider.targets.map(\.resources) == [[Self.a, Self.b], [], [Self.b]])
    }

    @Test func aHandedInGrantWhoseAudienceNobodyConfirmsNamesNoResource() async throws {
        let provider = ResourceProvider(.narrows, resources: [Self.a])
        provider.statesAudience(false)
        let session = try await session(provider, resources: [Self.a, Self.b], handedIn: true)
        _ = try? await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.a, scope: nil))
        #expect(await session.status().strategy == "session-only")
        _ = try await session.refresh(staleGeneration: nil)
        #expect(provider.targets.map(\.resources) == [[Self.a, Self.b], [], []])
    }

    @Test func aHandedInGrantOfSeveralResourcesIsLearntFromTheAudience() async throws {
        // The grant has a and b; tokend.toml lists four: each one left out in turn still leaves one outside.
        let provider = ResourceProvider(.narrows, resources: [Self.a, Self.b])
        let session = try await session(provider, resources: [Self.a, Self.b, Self.c, Self.d], handedIn: true)
        _ = try await session.getToken(minValidSeconds: nil, key: session.key(resource: Self.a, scope: nil))
        let status = await session.status()
        #expect(status.strategy == "shared-audience", "\(status.strategyReason)")
        #expect(provider.targets.last?.resources == [])
        let next = try await session.refresh(staleGeneration: nil)
        #expect(provider.targets.last?.resources == [Self.a, Self.b], "every refresh asks for the grant the provider showed")
        #expect(next.audience == [Self.a, Self.b])
    }

    @Test func invalidScopeTeachesNothing() async throws {
        final class ScopeRefusing: TokenEndpoint {
            let tokenURL: URL? = URL(string: "https://auth.example.com/token")
            func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
                RefreshAnswer(result: .failure(.rejected(code: "invalid_scope", reason: "invalid_scope")))
            }
            func revoke(token: Secret) async throws(TokenEndpointError) {}
        }
        let directory = NSTemporaryDirectory() + "tokend-audience-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        var record = SessionRecord(
            phase: .active, refreshToken: Secret("rt-0"), accessToken: Secret("t"), tokenType: "Bearer",
            expiresAt: 1_000_000 + 3600, generation: 1, lastRefreshAt: 1_000_000)
        record.grantResources = [Self.a, Self.b]
        try await file.save(record)
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: ScopeRefusing(), file: file, clock: TestClock(),
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: KeyPolicy(resources: [Self.a, Self.b], scope: "read write"))
        await session.start()
        _ = try? await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a))
        #expect(await session.status().strategy != "per-resource")
    }

    @Test func keyedCallsWhileTheStrategyIsUnknownWaitForTheBackoff() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b])
        provider.fail(true)
        let session = try await session(provider, resources: [Self.a, Self.b])
        _ = try? await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a))
        let calls = provider.calls
        #expect(calls >= 1)
        for _ in 0..<20 {
            let error = await #expect(throws: BrokerError.self) {
                _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.b))
            }
            #expect(error?.code == .upstreamUnavailable)
        }
        #expect(provider.calls == calls, "no token-endpoint request while backing off")
        #expect(await session.status().state == "backingOff")
    }

    @Test func invalidGrantForOneResourceEndsThatKeyNotTheSession() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b])
        provider.refuseGrant(for: Self.b)
        let session = try await session(provider, resources: [Self.a, Self.b], keys: {
            var policy = $0
            policy.narrowing = .keepsWide
            return policy
        })
        let error = await #expect(throws: BrokerError.self) {
            _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.b))
        }
        #expect(error?.code == .targetRefused)
        #expect(await session.status().state == "active")
        let forA = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a))
        #expect(forA.audience == [Self.a])
    }

    @Test func resettingTheStrategyForgetsItAndItsKeys() async throws {
        let provider = ResourceProvider(.keepsWide, resources: [Self.a, Self.b])
        let session = try await session(provider, resources: [Self.a, Self.b])
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.a))
        #expect(await session.status().strategy == "per-resource")
        let status = try await session.resetStrategy()
        #expect(status.strategy == "undetermined")
        #expect(status.tokens.isEmpty)
        _ = try await session.getToken(minValidSeconds: nil, key: TokenKey(resource: Self.b))
        #expect(await session.status().strategy == "per-resource")
    }
}
