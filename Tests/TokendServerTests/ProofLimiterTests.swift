import DPoP
import Foundation
import Synchronization
import Testing
import Varlink
@testable import TokendServer

/// GetProof's bounds (ProofBound): per person and session 200 proofs a second,
/// bursts of 400, with a key in the state file; 20 a second, bursts of 50,
/// with a key in a TPM, and 50 a second, bursts of 100, per TPM for all.
@Suite struct ProofLimiterTests {
    final class FakeTime: Sendable {
        let now = Mutex(1_000.0)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
    }

    /// The figures the man pages and docs/security.md state are the code's.
    @Test func theFiguresDocumented() throws {
        #expect(ProofBound.stateKey == ProofBound(perSecond: 200, burst: 400))
        #expect(ProofBound.tpmKey == ProofBound(perSecond: 20, burst: 50))
        #expect(ProofBound.tpm == ProofBound(perSecond: 50, burst: 100))
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func text(_ path: String) throws -> String {
            try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8).replacingOccurrences(of: "\n", with: " ")
        }
        func figures(_ bound: ProofBound) -> String { "\(Int(bound.perSecond)) a second, bursts of \(Int(bound.burst))" }
        let manual = try text("man/tokend.8")
        let proxy = try text("man/tokend-proxy.1")
        let security = try text("docs/security.md")
        for bound in [ProofBound.stateKey, .tpmKey] {
            #expect(manual.contains(figures(bound)))
            #expect(proxy.contains(figures(bound)))
        }
        #expect(manual.contains("at most \(figures(.tpm)), for all GetProof calls on that TPM"))
        #expect(proxy.contains("\(Int(ProofBound.tpm.perSecond)) a second for all sessions together"))
        #expect(security.contains("200 a second (bursts of 400)") && security.contains("20 a second (bursts of 50)"))
        #expect(security.contains("50 a second (bursts of 100) for all GetProof calls on one TPM"))
    }

    @Test(arguments: [KeyStorage.tpm, .state])
    func aBurstThenTheRate(_ storage: KeyStorage) {
        let time = FakeTime()
        let limiter = ProofLimiter(now: { time.now.withLock { $0 } })
        let bound = storage == .tpm ? ProofBound.tpmKey : .stateKey
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        for _ in 0..<Int(bound.burst) { #expect(limiter.take(for: alice, session: "s", storage: storage) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: storage) == 1)
        time.advance(0.5)  // half a second's worth more
        for _ in 0..<Int(bound.perSecond / 2) { #expect(limiter.take(for: alice, session: "s", storage: storage) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: storage) != nil)
    }

    /// A person's budget, not a uid's: another person is not slowed; another session has its own.
    @Test func perPersonAndSession() {
        let time = FakeTime()
        let limiter = ProofLimiter(now: { time.now.withLock { $0 } })
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        let aliceInAContainer = PeerCredentials(pid: 2, uid: 200_000, gid: 200_000, person: 1000)
        let bob = PeerCredentials(pid: 3, uid: 1001, gid: 1001)
        for _ in 0..<50 { #expect(limiter.take(for: alice, session: "s", storage: .tpm) == nil) }
        #expect(limiter.take(for: aliceInAContainer, session: "s", storage: .tpm) != nil)
        #expect(limiter.take(for: bob, session: "s", storage: .tpm) == nil)
        #expect(limiter.take(for: alice, session: "other", storage: .tpm) == nil)
    }

    /// Many persons and sessions with TPM keys share one TPM's bound; state keys do not count against it.
    @Test func oneBoundPerTPMForAllSessions() {
        let time = FakeTime()
        let limiter = ProofLimiter(now: { time.now.withLock { $0 } })
        var made = 0
        for person in 0..<10 {
            let peer = PeerCredentials(pid: Int32(10 + person), uid: UInt32(2000 + person), gid: 100)
            for session in ["a", "b"] {
                for _ in 0..<20 where limiter.take(for: peer, session: session, storage: .tpm) == nil { made += 1 }
            }
        }
        #expect(made == Int(ProofBound.tpm.burst))
        let carol = PeerCredentials(pid: 99, uid: 3000, gid: 100)
        #expect(limiter.take(for: carol, session: "c", storage: .tpm) == 1)
        #expect(limiter.take(for: carol, session: "c", storage: .state) == nil)
        time.advance(1)  // a second's worth for the TPM
        made = 0
        for _ in 0..<200 where limiter.take(for: carol, session: "c", storage: .tpm) == nil { made += 1 }
        #expect(made == Int(ProofBound.tpm.perSecond))
    }
}
