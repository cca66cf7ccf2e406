import DPoP
import Foundation
import Synchronization
import TPMKeys
import Testing
import Varlink
@testable import TokendServer

/// GetProof's bounds (ProofBound): per person and session 200 proofs a second,
/// bursts of 400, with a key in the state file. With a key in a TPM they come
/// from what one proof takes the chip: per person and session a quarter of
/// what it signs a second, all GetProof calls on it together half, each with
/// bursts of two seconds' worth.
@Suite struct ProofLimiterTests {
    final class FakeTime: Sendable {
        let now = Mutex(1_000.0)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
    }

    /// The figures the man pages and docs/security.md state are the code's.
    @Test func theFiguresDocumented() throws {
        #expect(ProofBound.stateKey == ProofBound(perSecond: 200, burst: 400))
        #expect(ProofBound.tpmKeyShare == 0.25 && ProofBound.tpmShare == 0.5)
        #expect(TPMSigning.assumed == .milliseconds(150) && TPMSigning.requestsWait == .seconds(2))
        // A chip that signs in 10 ms: 100 a second.
        #expect(ProofBound.tpmKey(signing: .milliseconds(10)) == ProofBound(perSecond: 25, burst: 50))
        #expect(ProofBound.tpm(signing: .milliseconds(10)) == ProofBound(perSecond: 50, burst: 100))
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func text(_ path: String) throws -> String {
            try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
                .replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\\(em", with: "—")
        }
        let state = "200 a second, bursts of 400"
        let person = "a quarter of what the TPM signs a second"
        let all = "half of what it signs a second for all GetProof calls on that TPM together"
        let bursts = "bursts of two seconds' worth"
        let wait = "more than two seconds of the TPM's signing"
        let assumed = "150 ms"
        for page in ["man/tokend.8", "man/tokend-proxy.1", "docs/security.md"] {
            let said = try text(page)
            for figure in [state, person, all, bursts, wait, assumed] {
                #expect(said.contains(figure), "\(page) does not say \"\(figure)\"")
            }
        }
    }

    @Test func aBurstThenTheRateWithAKeyInTheState() {
        let time = FakeTime()
        let limiter = ProofLimiter(signing: { .milliseconds(10) }, now: { time.now.withLock { $0 } })
        let bound = ProofBound.stateKey
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        for _ in 0..<Int(bound.burst) { #expect(limiter.take(for: alice, session: "s", storage: .state) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: .state) == 1)
        time.advance(0.5)  // half a second's worth more
        for _ in 0..<Int(bound.perSecond / 2) { #expect(limiter.take(for: alice, session: "s", storage: .state) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: .state) != nil)
    }

    /// A chip that signs in 40 ms (25 a second): a person gets a quarter, 6.25 a second, bursts of 12.
    @Test func aKeyInATPMGetsAShareOfWhatTheChipSigns() {
        let time = FakeTime()
        let limiter = ProofLimiter(signing: { .milliseconds(40) }, now: { time.now.withLock { $0 } })
        let alice = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        #expect(limiter.bounds(.tpm).person == ProofBound(perSecond: 6.25, burst: 12))
        for _ in 0..<12 { #expect(limiter.take(for: alice, session: "s", storage: .tpm) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: .tpm) == 1)
        time.advance(0.85)  // five more (and a part)
        for _ in 0..<5 { #expect(limiter.take(for: alice, session: "s", storage: .tpm) == nil) }
        #expect(limiter.take(for: alice, session: "s", storage: .tpm) != nil)
    }

    /// The bounds follow the measured time: a chip found slower gives fewer proofs, one found faster more.
    @Test func theBoundsFollowTheMeasuredSigningTime() {
        let signing = Mutex(Duration.milliseconds(150))
        let limiter = ProofLimiter(signing: { signing.withLock { $0 } })
        #expect(limiter.bounds(.tpm).tpm.perSecond < 3.4 && limiter.bounds(.tpm).tpm.burst == 6)
        signing.withLock { $0 = .milliseconds(2) }
        #expect(limiter.bounds(.tpm).tpm == ProofBound(perSecond: 250, burst: 500))
        #expect(limiter.bounds(.state).person == .stateKey)
        // However slow the chip, a burst of two is left: a request and its retry with the server's nonce.
        signing.withLock { $0 = .seconds(10) }
        #expect(limiter.bounds(.tpm).person.burst == 2 && limiter.bounds(.tpm).tpm.burst == 2)
        #expect(limiter.take(for: nil, session: "slow", storage: .tpm) == nil)
        #expect(limiter.take(for: nil, session: "slow", storage: .tpm) == nil)
        #expect(limiter.take(for: nil, session: "slow", storage: .tpm) != nil)
    }

    /// A person's budget, not a uid's: another person is not slowed; another session has its own.
    @Test func perPersonAndSession() {
        let time = FakeTime()
        let limiter = ProofLimiter(signing: { .milliseconds(10) }, now: { time.now.withLock { $0 } })
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
        let limiter = ProofLimiter(signing: { .milliseconds(10) }, now: { time.now.withLock { $0 } })
        let chip = ProofBound.tpm(signing: .milliseconds(10))
        var made = 0
        for person in 0..<10 {
            let peer = PeerCredentials(pid: Int32(10 + person), uid: UInt32(2000 + person), gid: 100)
            for session in ["a", "b"] {
                for _ in 0..<20 where limiter.take(for: peer, session: session, storage: .tpm) == nil { made += 1 }
            }
        }
        #expect(made == Int(chip.burst))
        let carol = PeerCredentials(pid: 99, uid: 3000, gid: 100)
        #expect(limiter.take(for: carol, session: "c", storage: .tpm) == 1)
        #expect(limiter.take(for: carol, session: "c", storage: .state) == nil)
        time.advance(1)  // a second's worth for the TPM
        made = 0
        for _ in 0..<200 where limiter.take(for: carol, session: "c", storage: .tpm) == nil { made += 1 }
        #expect(made == Int(chip.perSecond))
    }
}
