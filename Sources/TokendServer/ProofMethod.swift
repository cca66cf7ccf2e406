import Broker
import DPoP
import Foundation
import OAuth
import Synchronization
import TokendInterface
import Varlink

/// GetProof: a DPoP proof (RFC 9449 §7) for one request to a resource
/// server, bound (`ath`) to the current token the caller may have.
///
/// `authorizedToken` applies every access and audience rule of GetToken and
/// returns the token handed out; the proof is signed for exactly that token.
/// Proofs are limited per person and session (ProofLimiter): with a key in a
/// TPM each one is a TPM2_Sign, and one person must not take the chip for all.
func proofMethod(
    _ broker: Broker,
    authorizedToken: @escaping @Sendable (CallContext, SessionActor, _ resource: String?, _ page: String?) async throws -> Token,
    limiter: ProofLimiter = ProofLimiter(),
    servers: ProofServers = .shared
) -> MethodHandler {
    typealias I = BrokerInterface
    return .call { parameters, context in
        let call = try parameters.decode(I.GetProof.In.self)
        let session = try broker.session(call.session)
        let key: any ProofKey
        switch await session.keyForProofs() {
        case .notUsed(let reason):
            throw VarlinkError(I.Error.proofNotAvailable, ["session": .string(session.name), "reason": .string(reason)])
        case .unavailable(let reason):
            throw VarlinkError(I.Error.keyUnavailable, ["session": .string(session.name), "reason": .string(reason)])
        case .key(let usable):
            key = usable
        }
        // The request must be one a proof can name before anything is spent on it.
        guard let htu = try? TargetURI.htu(call.url) else { throw VarlinkError.invalidParameter("url") }
        func makes(_ nonce: String?) -> Bool {
            (try? DPoPProof.claims(method: call.method, url: htu, nonce: nonce, accessToken: nil, now: 1, jti: "")) != nil
        }
        guard makes(nil) else { throw VarlinkError.invalidParameter("method") }
        guard makes(call.nonce) else { throw VarlinkError.invalidParameter("nonce") }
        if let wait = limiter.take(for: context.peer, session: session.name) {
            throw VarlinkError(I.Error.rateLimited, ["session": .string(session.name), "retryAfter": .int(wait)])
        }
        let token = try await authorizedToken(context, session, call.resource, call.page)
        // iat on the resource server's clock where its Date showed skew, and set back as the token
        // endpoint's proofs are: a server on a coarse clock (Glewlwyd's userinfo) takes none from its future.
        let now = servers.serverTime(for: TargetURI.origin(ofHTU: htu), localTime: Date().timeIntervalSince1970) - HTTPTokenEndpoint.iatSetBack
        let proof: String
        do throws(ProofError) {
            proof = try await DPoPProof.make(
                key: key, method: call.method, url: htu, nonce: call.nonce, accessToken: token.accessToken.reveal(), now: now)
        } catch {
            let reason = error.keyError?.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : error.description
            throw VarlinkError(I.Error.keyUnavailable, ["session": .string(session.name), "reason": .string(reason)])
        }
        return try I.GetProof.Out(proof: proof, token: token.wire).parameters()
    }
}

/// Proofs per person and session: a token bucket of `burst` proofs refilled
/// at `perSecond`. The figure, 20 a second with bursts of 50, is well above
/// what one client's requests need and well below what a TPM signs (tens a
/// second): one person cannot keep the chip from everyone else.
final class ProofLimiter: Sendable {
    struct Key: Hashable {
        var person: UInt32
        var session: String
    }

    let perSecond: Double
    let burst: Double
    private let buckets = Mutex<[Key: (tokens: Double, at: Double)]>([:])
    private let now: @Sendable () -> Double

    init(perSecond: Double = 20, burst: Double = 50, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.perSecond = perSecond
        self.burst = burst
        self.now = now
    }

    /// nil when allowed (and counted); else the seconds until the next proof is.
    func take(for peer: PeerCredentials?, session: String) -> Int? {
        let key = Key(person: peer?.person ?? UInt32.max, session: session)
        let time = now()
        let (rate, capacity) = (perSecond, burst)
        return buckets.withLock { buckets in
            var bucket = buckets[key] ?? (capacity, time)
            bucket.tokens = min(capacity, bucket.tokens + max(0, time - bucket.at) * rate)
            bucket.at = time
            defer {
                buckets[key] = bucket
                if buckets.count > 4096 { buckets = buckets.filter { $0.value.tokens + (time - $0.value.at) * rate < capacity } }
            }
            guard bucket.tokens >= 1 else { return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up))) }
            bucket.tokens -= 1
            return nil
        }
    }
}
