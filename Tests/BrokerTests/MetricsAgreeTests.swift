import OAuth
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

/// The metrics count what status counts, in the same step: right after a
/// stampede a scrape says what status says (a copy gathered once a second
/// said 0 coalesced while status said 99).
@Suite struct MetricsAgreeTests {
    @Test func aStampedeOfGetTokenAndRefreshCountsTheSameInBoth() async throws {
        let h = try Harness()
        h.endpoint.hold()
        try await h.expiredSession(generation: 3)
        try await withThrowingTaskGroup(of: Token.self) { group in
            for index in 0..<100 {
                group.addTask {
                    index % 2 == 0
                        ? try await h.session.getToken(minValidSeconds: nil)
                        : try await h.session.refresh(staleGeneration: 3)
                }
            }
            defer { h.endpoint.release() }  // also when a wait fails: the callers are not left holding the group
            try await eventually { h.endpoint.waiting == 1 }
            // The one refresh in flight (the session's own, started at expiry, or a caller's); every caller joins it.
            try await eventually { await h.session.status().coalesced >= 99 }
            h.endpoint.release()
            for try await token in group { #expect(token.generation == 4) }
        }
        // Forced refreshes, each its own: counted as refreshes in both.
        for generation in 4..<6 { _ = try await h.session.refresh(staleGeneration: generation) }
        let status = await h.session.status()
        let metrics = h.file.metrics
        #expect(status.coalesced >= 99 && status.refreshes == 3)
        #expect(metrics.coalesced.value == UInt64(status.coalesced))
        #expect(metrics.refreshes.value == UInt64(status.refreshes))
        #expect(metrics.failures.value == UInt64(status.failures))
    }
}
