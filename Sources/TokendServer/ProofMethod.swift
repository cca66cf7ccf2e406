import Broker
import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
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
            if let queue = error.keyError, queue.saysNothingOfTheKey {
                // The TPM's lane for requests is full (TPMKeys' TPMThread): refused as a rate, not as a key problem.
                throw VarlinkError(I.Error.rateLimited, ["session": .string(session.name), "retryAfter": .int(queue.retryAfter ?? 1)])
            }
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
