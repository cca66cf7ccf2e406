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
/// Proofs are made only for the targets the session allows, never for the
/// provider's own endpoints (ProofTargets, proofTargetRefusal).
/// Proofs are limited per person and session, and with a key in a TPM per
/// TPM too (ProofLimiter, ProofBound): each one is then a TPM2_Sign, and one
/// person must not take the chip for all.
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
        // The request must be one a proof can name, for a target the session allows, before anything is spent on it.
        let target: TargetURL
        do throws(ProofError) {
            target = try TargetURL(call.url)
        } catch {
            throw VarlinkError.invalidParameter("url", reason: error.description)
        }
        let htu = target.htu
        func makes(_ nonce: String?) -> Bool {
            (try? DPoPProof.claims(method: call.method, url: htu, nonce: nonce, accessToken: nil, now: 1, jti: "")) != nil
        }
        guard makes(nil) else { throw VarlinkError.invalidParameter("method") }
        guard makes(call.nonce) else { throw VarlinkError.invalidParameter("nonce") }
        if let reason = proofTargetRefusal(target, of: session, resource: call.resource, page: call.page) {
            throw VarlinkError.invalidParameter("url", reason: reason)
        }
        // Access first: a caller refused the token spends none of the proof budget.
        let token = try await authorizedToken(context, session, call.resource, call.page)
        if let wait = limiter.take(for: context.peer, session: session.name, storage: key.storage) {
            throw VarlinkError(I.Error.rateLimited, ["session": .string(session.name), "retryAfter": .int(wait)])
        }
        // iat on the resource server's clock where its Date showed skew, and set back as the token
        // endpoint's proofs are: a server on a coarse clock (Glewlwyd's userinfo) takes none from its future.
        let now = servers.serverTime(for: target.origin, localTime: Date().timeIntervalSince1970) - HTTPTokenEndpoint.iatSetBack
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

extension VarlinkError {
    /// org.varlink.service.InvalidParameter naming `parameter`, with why it is refused.
    static func invalidParameter(_ parameter: String, reason: String) -> VarlinkError {
        VarlinkError("org.varlink.service.InvalidParameter", ["parameter": .string(parameter), "reason": .string(reason)])
    }
}

/// Token buckets for proofs: `burst` proofs refilled at `perSecond`.
struct ProofBound: Sendable, Equatable {
    var perSecond: Double
    var burst: Double

    /// Per person and session, key in the state file: signing costs about
    /// 0.3 ms of CPU, so the bound is set by what a busy client (tokend-proxy
    /// with one proof per request) needs, not by the key.
    static let stateKey = ProofBound(perSecond: 200, burst: 400)
    /// Per person and session, key in a TPM: each proof is a TPM2_Sign, and a
    /// TPM signs tens a second.
    static let tpmKey = ProofBound(perSecond: 20, burst: 50)
    /// Every GetProof with a TPM key, all persons and sessions together: the
    /// chip keeps time for the sessions' own refresh proofs, whoever asks.
    static let tpm = ProofBound(perSecond: 50, burst: 100)
}

/// Proofs per person and session (ProofBound.stateKey or .tpmKey, by where
/// the session's key lives), and for TPM keys also per TPM (ProofBound.tpm):
/// one person cannot keep the chip from everyone else.
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

    let bounds: [KeyStorage: ProofBound]
    let tpm: ProofBound
    private let buckets = Mutex<(persons: [Key: Bucket], tpm: Bucket?)>(([:], nil))
    private let now: @Sendable () -> Double

    init(
        bounds: [KeyStorage: ProofBound] = [.state: .stateKey, .tpm: .tpmKey], tpm: ProofBound = .tpm,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.bounds = bounds
        self.tpm = tpm
        self.now = now
    }

    /// nil when allowed (and counted); else the seconds until the next proof is.
    func take(for peer: PeerCredentials?, session: String, storage: KeyStorage) -> Int? {
        let key = Key(person: peer?.person ?? UInt32.max, session: session, storage: storage)
        let bound = bounds[storage] ?? .tpmKey
        let time = now()
        let chip = tpm
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
                        let full = self.bounds[entry.key.storage] ?? .tpmKey
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
