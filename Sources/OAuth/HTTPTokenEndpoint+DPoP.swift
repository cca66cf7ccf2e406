import DPoP
import Foundation
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
            learn(from: answer, origin: origin, sentAt: sentAt)
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

    /// A proof for a POST to `htu`, `iat` on the server's clock.
    func proof(_ key: any ProofKey, htu: String, origin: String, nonce: String?) async throws(TokenEndpointError) -> String {
        let now = proofServers.serverTime(for: origin, localTime: Date().timeIntervalSince1970)
        do {
            return try await DPoPProof.make(key: key, method: "POST", url: htu, nonce: nonce, now: now)
        } catch {
            // No request is sent without its proof: a key that cannot sign costs no upstream call.
            throw .transient(error.keyError?.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : "the DPoP key cannot sign: \(error.description)",
                code: Self.keyUnavailableCode)
        }
    }

    /// What every answer teaches: the server's next nonce and its clock.
    func learn(from answer: HTTPAnswer, origin: String, sentAt: Double) {
        if let nonce = answer.dpopNonce { proofServers.keep(nonce: nonce, for: origin) }
        if let date = answer.date, let serverTime = TokenResponse.imfFixdate(date) {
            proofServers.observe(serverTime: serverTime, localTime: sentAt, for: origin)
        }
    }

    /// Names the clock when the provider refused a proof: a refusal for its time is told with the skew.
    func explainingProof(_ result: Result<TokenResponse, TokenEndpointError>, url: URL) -> Result<TokenResponse, TokenEndpointError> {
        guard case .failure(let error) = result, error.code == "invalid_dpop_proof" else { return result }
        let origin = (try? TargetURI.htu(url.absoluteString)).map(TargetURI.origin(ofHTU:)) ?? ""
        let skew = Int(proofServers.skew(for: origin).rounded())
        let clock = skew == 0
            ? "" : "; the provider's clock is \(abs(skew)) s \(skew > 0 ? "ahead of" : "behind") this host's (its Date header), which the next proof's iat follows"
        return .failure(.transient(
            "\(Self.proofRefusedReason) (\(error.reason))\(clock); the refresh token is kept",
            code: error.code, retryAfter: error.retryAfter))
    }

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
