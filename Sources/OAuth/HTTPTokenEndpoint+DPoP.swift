import DPoP
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// DPoP (RFC 9449) at the token endpoint: every request of a session that
/// has a key carries a fresh proof; the server's nonce is kept from every
/// answer for the next request, and a `use_dpop_nonce` refusal is answered
/// by exactly one retry, only with a nonce the request did not already carry.
extension HTTPTokenEndpoint {
    public func useProofKey(_ key: (any ProofKey)?) {
        sessionProofKey.withLock { $0 = key }
    }

    /// The key this session's refreshes are signed with; nil: no proofs.
    public var proofKey: (any ProofKey)? { sessionProofKey.withLock { $0 } }

    /// Sends `form` to `url` with a proof signed by `key` (none when nil).
    func post(_ form: FormRequest, to url: URL, proofKey key: (any ProofKey)?) async throws(TokenEndpointError)
        -> HTTPAnswer
    {
        guard let key else { return try await post(form, to: url) }
        let htu: String
        do {
            htu = try TargetURI.htu(url.absoluteString)
        } catch {
            throw .transient("no DPoP proof can be made for \(url): \(error.description)")
        }
        let origin = TargetURI.origin(ofHTU: htu)
        var nonce = proofServers.nonce(for: origin)
        var retried = false
        while true {
            var signed = form
            signed.headers.append(("DPoP", try await proof(key, htu: htu, origin: origin, nonce: nonce)))
            let sentAt = Date().timeIntervalSince1970
            let answer = try await post(signed, to: url)
            learn(from: answer, origin: origin, sentAt: sentAt, receivedAt: Date().timeIntervalSince1970)
            // One retry, and only with a nonce this request did not carry: a
            // server that keeps asking is answered with its refusal.
            if !retried, answer.asksForNonce, let fresh = answer.dpopNonce, fresh != nonce {
                nonce = fresh
                retried = true
                continue
            }
            return answer
        }
    }

    /// A proof for a POST to `htu`, `iat` on the server's clock, set back by `iatSetBack`.
    func proof(_ key: any ProofKey, htu: String, origin: String, nonce: String?) async throws(TokenEndpointError) -> String {
        let now = proofServers.serverTime(for: origin, localTime: Date().timeIntervalSince1970) - Self.iatSetBack
        do {
            return try await DPoPProof.make(key: key, method: "POST", url: htu, nonce: nonce, now: now)
        } catch {
            // No request is sent without its proof: a key that cannot sign costs no upstream call.
            throw .transient(error.keyError?.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : "the DPoP key cannot sign: \(error.description)",
                code: Self.keyUnavailableCode)
        }
    }

    /// What every answer teaches: the server's next nonce and its clock.
    func learn(from answer: HTTPAnswer, origin: String, sentAt: Double, receivedAt: Double) {
        if let nonce = answer.dpopNonce { proofServers.keep(nonce: nonce, for: origin) }
        if let date = answer.date, let serverTime = TokenResponse.imfFixdate(date) {
            let skew = Self.skew(shownBy: serverTime, sentAt: sentAt, receivedAt: receivedAt)
            proofServers.observe(serverTime: receivedAt + skew, localTime: receivedAt, for: origin)
        }
    }

    /// The clock skew an answer's Date header shows (seconds the server is
    /// ahead; negative: behind). The server stamped its answer at some moment
    /// between `sentAt` and `receivedAt` on this host's clock, and its Date
    /// drops the fraction of a second: a Date within that span shows no skew,
    /// however slow the answer was. Outside it, the skew is read at
    /// `receivedAt`, the reading that puts the server's clock least far ahead:
    /// `iat` then errs to the past, which servers take for a while, never to
    /// their future, which some refuse outright (Glewlwyd: 403
    /// invalid_dpop_proof). Read against `sentAt` alone, a provider that
    /// takes 3 s to answer would seem 3 s ahead, and the next proof would be
    /// refused.
    static func skew(shownBy serverTime: Double, sentAt: Double, receivedAt: Double) -> Double {
        guard serverTime.isFinite, sentAt.isFinite, receivedAt.isFinite else { return 0 }
        if serverTime + 1 >= sentAt, serverTime <= max(receivedAt, sentAt) { return 0 }
        return serverTime - max(receivedAt, sentAt)
    }

    /// Names the clock when the provider refused a proof: a refusal for its time is told with the skew.
    func explainingProof(_ result: Result<TokenResponse, TokenEndpointError>, url: URL) -> Result<TokenResponse, TokenEndpointError> {
        guard case .failure(let error) = result, error.code == "invalid_dpop_proof" else { return result }
        let origin = (try? TargetURI.htu(url.absoluteString)).map(TargetURI.origin(ofHTU:)) ?? ""
        return .failure(.transient(
            "\(Self.proofRefusedReason) (\(error.reason))\(clockNote(origin)); the refresh token is kept",
            code: error.code, retryAfter: error.retryAfter))
    }

    /// What the server's clock has to do with a refused proof: the skew its
    /// Date showed, followed by the next proof's iat, or too large to follow.
    func clockNote(_ origin: String) -> String {
        if let unfollowed = proofServers.unfollowedSkew(for: origin) {
            let skew = Int(unfollowed.rounded())
            return "; the provider's clock is \(abs(skew)) s \(skew > 0 ? "ahead of" : "behind") this host's (its Date header), "
                + "more than the \(Int(ProofServers.followedSkew)) s proofs follow: set the clock right on one side"
        }
        let skew = Int(proofServers.skew(for: origin).rounded())
        return skew == 0
            ? "" : "; the provider's clock is \(abs(skew)) s \(skew > 0 ? "ahead of" : "behind") this host's (its Date header), which the next proof's iat follows"
    }

    /// Seconds every proof's `iat` is set back. A server may take no `iat`
    /// from its future, not even a part of a second (Glewlwyd), while its
    /// clock reads a little behind this host's: skews within
    /// ProofServers.tolerance are not corrected, and a server that reads the
    /// coarse clock (glibc's time(), as Glewlwyd does) is still in the last
    /// second for some milliseconds after this host's clock has turned: a
    /// proof signed then with this second's iat is refused (403
    /// invalid_dpop_proof). Servers take proofs some seconds old (RFC 9449
    /// §11.1; Glewlwyd as tested, 60 s). Proofs for resource servers need the same.
    public static let iatSetBack = ProofServers.tolerance

    /// How a refusal of a proof begins (status shows it as the DPoP problem).
    public static let proofRefusedReason = "the provider refused the DPoP proof"

    /// The code a request carries in its error when its key could not sign (no request was sent).
    public static let keyUnavailableCode = "dpop_key_unavailable"
}

extension HTTPTokenEndpoint.HTTPAnswer {
    /// A token endpoint's `use_dpop_nonce` (RFC 9449 §8): a 400 or 401 naming it.
    var asksForNonce: Bool {
        guard status == 400 || status == 401 else { return false }
        return providerObject(body)?["error"]?.stringValue == "use_dpop_nonce"
    }
}
