import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
import TPMKeys
import Varlink

/// Token buckets for proofs: `burst` proofs refilled at `perSecond`.
struct ProofBound: Sendable, Equatable {
    var perSecond: Double
    var burst: Double

    /// Per person and session, key in the state file: signing costs about
    /// 0.3 ms of CPU, so the bound is set by what a busy client (tokend-proxy
    /// with one proof per request) needs, not by the key.
    static let stateKey = ProofBound(perSecond: 200, burst: 400)

    /// Per person and session, key in a TPM whose proof takes `signing`: a
    /// quarter of what the chip signs a second, bursts of two seconds' worth.
    static func tpmKey(signing: Duration) -> ProofBound { share(tpmKeyShare, of: signing) }

    /// Every GetProof with a TPM key, all persons and sessions together: half
    /// of what the chip signs a second, bursts of two seconds' worth. The other
    /// half is the sessions' own proofs' (which go first anyway, TPMThread).
    static func tpm(signing: Duration) -> ProofBound { share(tpmShare, of: signing) }

    static let tpmKeyShare = 0.25
    static let tpmShare = 0.5

    /// `fraction` of what a chip signs a second when a proof takes it `signing`; bursts of two seconds' worth,
    /// at least `leastBurst`.
    static func share(_ fraction: Double, of signing: Duration) -> ProofBound {
        let perSecond = fraction / max(signing / .seconds(1), 0.000_1)
        return ProofBound(perSecond: perSecond, burst: max(leastBurst, (perSecond * 2).rounded(.down)))
    }

    /// However slow the chip: one request and its retry with the server's nonce (use_dpop_nonce), which
    /// needs a second proof at once.
    static let leastBurst = 2.0
}

/// Proofs per person and session (ProofBound.stateKey, or .tpmKey by the
/// TPM's measured signing time), and for TPM keys also per TPM (ProofBound.tpm):
/// one person cannot keep the chip from everyone else, and GetProof together
/// cannot ask more of it than it signs.
final class ProofLimiter: Sendable {
    struct Key: Hashable {
        var person: UInt32
        var session: String
        var storage: KeyStorage
    }
    private struct Bucket {
        var tokens: Double
        var at: Double
        mutating func refill(_ bound: ProofBound, at time: Double) {
            tokens = min(bound.burst, tokens + max(0, time - at) * bound.perSecond)
            at = time
        }
        func wait(_ bound: ProofBound) -> Int { max(1, Int(((1 - tokens) / bound.perSecond).rounded(.up))) }
    }

    private let buckets = Mutex<(persons: [Key: Bucket], tpm: Bucket?)>(([:], nil))
    private let now: @Sendable () -> Double
    /// What one proof takes the TPM (TPMSigning.time: measured).
    private let signing: @Sendable () -> Duration

    init(
        signing: @escaping @Sendable () -> Duration = { TPMSigning.time },
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.signing = signing
        self.now = now
    }

    /// The bounds now: per person and session for `storage`, and per TPM.
    func bounds(_ storage: KeyStorage) -> (person: ProofBound, tpm: ProofBound) {
        let signing = self.signing()
        return (storage == .state ? .stateKey : .tpmKey(signing: signing), .tpm(signing: signing))
    }

    /// nil when allowed (and counted); else the seconds until the next proof is.
    func take(for peer: PeerCredentials?, session: String, storage: KeyStorage) -> Int? {
        let key = Key(person: peer?.person ?? UInt32.max, session: session, storage: storage)
        let (bound, chip) = bounds(storage)
        let tpmKey = bounds(.tpm).person
        let time = now()
        return buckets.withLock { buckets in
            var bucket = buckets.persons[key] ?? Bucket(tokens: bound.burst, at: time)
            bucket.refill(bound, at: time)
            var shared = buckets.tpm ?? Bucket(tokens: chip.burst, at: time)
            if storage == .tpm { shared.refill(chip, at: time) }
            defer {
                buckets.persons[key] = bucket
                if storage == .tpm { buckets.tpm = shared }
                if buckets.persons.count > 4096 {
                    buckets.persons = buckets.persons.filter { entry in
                        let full = entry.key.storage == .state ? ProofBound.stateKey : tpmKey
                        return entry.value.tokens + (time - entry.value.at) * full.perSecond < full.burst
                    }
                }
            }
            guard bucket.tokens >= 1 else { return bucket.wait(bound) }
            if storage == .tpm {
                guard shared.tokens >= 1 else { return shared.wait(chip) }
                shared.tokens -= 1
            }
            bucket.tokens -= 1
            return nil
        }
    }
}
