import Synchronization
import Testing
import UnixServer
import Varlink

@testable import TokendServer

/// Forced refreshes are counted per person: a user's subordinate uids (a user
/// namespace's inner users) share the user's budget.
@Suite struct ForcedRefreshLimiterTests {
    /// uid 1000 owns 100000...165535; uid 1001 owns 165536...231071.
    let ids = SubordinateIDs(parsing: "alice:100000:65536\nbob:165536:65536\n", resolve: { ["alice": 1000, "bob": 1001][$0] })

    /// A clock the test moves.
    final class Time: Sendable {
        let now: Mutex<Double>
        init(_ now: Double) { self.now = Mutex(now) }
    }

    func limiter(perMinute: Int, at time: Time) -> ForcedRefreshLimiter {
        ForcedRefreshLimiter(perMinute: perMinute, now: { time.now.withLock { $0 } })
    }

    /// A peer as the server admits it: its person from the subordinate ranges.
    func peer(_ uid: UInt32) -> PeerCredentials { PeerCredentials(pid: 1, uid: uid, gid: uid, person: ids.person(of: uid)) }

    @Test func twoUidsOfOnePersonShareOneBudget() {
        let time = Time(1000)
        let limiter = limiter(perMinute: 6, at: time)
        for inner in 0..<6 { #expect(limiter.take(for: peer(100_000 + UInt32(inner)), session: "default") == nil) }
        // The person's budget is spent, whichever uid asks next, the user's own included.
        #expect(limiter.take(for: peer(100_042), session: "default") == 10)
        #expect(limiter.take(for: peer(1000), session: "default") == 10)
        // Another person, and another session, have their own.
        #expect(limiter.take(for: peer(165_536), session: "default") == nil)
        #expect(limiter.take(for: peer(100_001), session: "work") == nil)
        // Refilled at perMinute / 60 per second.
        time.now.withLock { $0 += 10 }
        #expect(limiter.take(for: peer(100_007), session: "default") == nil)
    }

    @Test func aUidOutsideEveryRangeIsItsOwnPerson() {
        let time = Time(0)
        let limiter = limiter(perMinute: 1, at: time)
        #expect(limiter.take(for: peer(4242), session: "default") == nil)
        #expect(limiter.take(for: peer(4243), session: "default") == nil)
        #expect(limiter.take(for: peer(4242), session: "default") != nil)
    }
}
