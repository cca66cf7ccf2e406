#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// What tokend learns of each server it sends proofs to, by origin: the
/// last DPoP nonce it gave (RFC 9449 §8: kept from every answer, successful
/// ones included, for the next request) and how far its clock is from this
/// host's (from its Date header), so that `iat` follows the server's clock
/// within `followedSkew`; a clock further off is named, not followed.
public final class ProofServers: Sendable {
    struct Known {
        var nonce: String?
        var skew: Double = 0
        /// A skew beyond `followedSkew` the last Date showed (then `skew` is 0).
        var unfollowed: Double?
    }
    let known = Mutex<[String: Known]>([:])
    /// Servers remembered at most; past that one other is forgotten.
    static let limit = 256

    /// The one table every session's requests share: a nonce is the server's, not a session's.
    public static let shared = ProofServers()

    public init() {}

    /// Clock differences below this are the Date header's one-second
    /// resolution and the request's own time, not skew.
    public static let tolerance = 2.0

    /// The most skew `iat` follows (seconds, either way): six minutes, the
    /// five minutes clocks are seen apart in practice and a margin. A Date
    /// header is the server's word, and a server whose clock is further off
    /// would otherwise post-date (or pre-date) every proof of this host without
    /// limit, proofs for resource servers on its origin included. Beyond it
    /// proofs keep this host's time and the skew is named (`unfollowedSkew`).
    public static let followedSkew = 360.0

    public func nonce(for origin: String) -> String? {
        known.withLock { $0[origin]?.nonce }
    }

    public func keep(nonce: String, for origin: String) {
        guard !nonce.isEmpty, nonce.utf8.count <= DPoPProof.maximumNonce, nonce.allSatisfy(DPoPProof.isNonceCharacter) else { return }
        update(origin) { $0.nonce = nonce }
    }

    /// `serverTime` (the Date header) seen at `localTime` (both Unix seconds).
    public func observe(serverTime: Double, localTime: Double, for origin: String) {
        guard serverTime.isFinite, localTime.isFinite else { return }
        let skew = serverTime - localTime
        update(origin) { known in
            known.skew = abs(skew) <= Self.tolerance || abs(skew) > Self.followedSkew ? 0 : skew
            known.unfollowed = abs(skew) > Self.followedSkew ? skew : nil
        }
    }

    /// The skew the server's last Date showed when it was too large to follow, else nil.
    public func unfollowedSkew(for origin: String) -> Double? {
        known.withLock { $0[origin]?.unfollowed }
    }

    /// Seconds the server's clock is ahead of this host's (negative: behind).
    public func skew(for origin: String) -> Double {
        known.withLock { $0[origin]?.skew ?? 0 }
    }

    /// This host's `localTime` as the server's clock reads it.
    public func serverTime(for origin: String, localTime: Double) -> Double {
        localTime + skew(for: origin)
    }

    func update(_ origin: String, _ change: (inout Known) -> Void) {
        known.withLock { known in
            var entry = known[origin] ?? Known()
            change(&entry)
            known[origin] = entry
            if known.count > Self.limit {
                // Rare (more than 256 providers): drop any one other than this one.
                if let other = known.keys.first(where: { $0 != origin }) { known[other] = nil }
            }
        }
    }
}
