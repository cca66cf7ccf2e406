import Synchronization
import Testing
import Varlink
@testable import TokendServer

/// GetProof's bound: 20 proofs a second per person and session, bursts of 50.
@Suite struct ProofLimiterTests {
    final class FakeTime: Sendable {
        let now = Mutex(1_000.0)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
    }

    @Test func aBurstThenTheRate() {
        let time = FakeTime()
        let limiter = ProofLimiter(now: { time.now.withLock { $0 } })
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        for _ in 0..<50 { #expect(limiter.take(for: alice, session: "s") == nil) }
        #expect(limiter.take(for: alice, session: "s") == 1)
        time.advance(0.5)  // ten more
        for _ in 0..<10 { #expect(limiter.take(for: alice, session: "s") == nil) }
        #expect(limiter.take(for: alice, session: "s") != nil)
    }

    /// A person's budget, not a uid's: another person is not slowed; another session has its own.
    @Test func perPersonAndSession() {
        let time = FakeTime()
        let limiter = ProofLimiter(now: { time.now.withLock { $0 } })
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        let aliceInAContainer = PeerCredentials(pid: 2, uid: 200_000, gid: 200_000, person: 1000)
        let bob = PeerCredentials(pid: 3, uid: 1001, gid: 1001)
        for _ in 0..<50 { #expect(limiter.take(for: alice, session: "s") == nil) }
        #expect(limiter.take(for: aliceInAContainer, session: "s") != nil)
        #expect(limiter.take(for: bob, session: "s") == nil)
        #expect(limiter.take(for: alice, session: "other") == nil)
    }
}
