import Foundation
import Logging
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

/// Refresh(staleGeneration: g) on a fleet host: a refresh already in flight
/// that began before g existed can end on g itself, so it answers no such caller.
@Suite struct FleetStaleGenerationTests {
    let clock = TestClock()
    let endpoint = FakeEndpoint()
    let store = FakeSharedStore()
    let session: SessionActor

    init() throws {
        let directory = NSTemporaryDirectory() + "tokend-broker-\(UUID().uuidString.prefix(8))"
        session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: endpoint, file: try StateStore(directory: directory).file(for: "default"), clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            shared: store)
    }

    func record(generation: Int, refreshing: Bool) -> SessionRecord {
        SessionRecord(
            phase: .active, refreshToken: Secret("fleet-refresh-\(generation)"),
            accessToken: Secret("fleet-access-\(generation)"), tokenType: "Bearer",
            expiresAt: Int(clock.now()) + 500, expirySource: "expires_in", generation: generation,
            lastRefreshAt: Int(clock.now()), refreshStartedAt: refreshing ? Int(clock.now()) : nil)
    }

    /// The fleet test's interleaving (test_fleet.py, a host cut off while holding the lock): this host
    /// starts while another refreshes generation 0 and follows that refresh; the other host's generation 1
    /// arrives by notification while the follower still waits for the lock; a caller then says generation
    /// 1 was refused. It gets generation 2 from an upstream call of this host's own, not UpstreamUnavailable.
    @Test func aCallerRefusingTheNewestGenerationIsNotAnsweredByAnOlderRefresh() async throws {
        store.otherHostLocks()
        store.otherHostWrites(record(generation: 0, refreshing: true))
        await session.start()
        // The follower of the other host's refresh waits for the lock.
        try await eventually { store.waitingForLock == 1 }
        store.otherHostWrites(record(generation: 1, refreshing: false))
        try await eventually { await session.status().generation == 1 }
        #expect(await session.status().state == "refreshing")

        let caller = Task { try await session.refresh(staleGeneration: 1) }
        try await eventually { await session.refreshWaiters == 1 }
        store.otherHostReleases()
        let token = try await caller.value
        #expect(token.generation == 2)
        #expect(endpoint.calls == 1)
        #expect(endpoint.seenRefreshTokens == ["fleet-refresh-1"])
        #expect(store.copy?.record.generation == 2)
        await session.stop()
    }

    /// A caller refusing a generation joins a refresh of that generation already in flight: one upstream call.
    @Test func aRefreshOfTheRefusedGenerationIsJoined() async throws {
        store.otherHostWrites(record(generation: 1, refreshing: false))
        await session.start()
        try await eventually { await session.status().generation == 1 }
        endpoint.hold()
        let first = Task { try await session.refresh(staleGeneration: nil) }
        try await eventually { endpoint.waiting == 1 }
        let second = Task { try await session.refresh(staleGeneration: 1) }
        try await eventually { await session.refreshWaiters == 1 }
        endpoint.release()
        #expect(try await first.value.generation == 2)
        #expect(try await second.value.generation == 2)
        #expect(endpoint.calls == 1)
        #expect(await session.status().coalesced == 1)
        await session.stop()
    }
}
