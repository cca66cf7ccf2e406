#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

extension Credentials {
    /// A proof of `target` from tokend (GetProof), with the token it is bound to and `cookies`. The
    /// proof carries `nonce`, else the upstream's last one.
    func prove(_ target: ProofTarget, cookies: String, nonce: String? = nil, nonceRetry: Bool = false) async throws -> RequestCredentials {
        // GetProof has no scope: its token is the session's (or the resource's), never a narrower one.
        if scope != nil { throw ProofRefused.scoped(session: session ?? "default") }
        let asked = Date().timeIntervalSince1970
        let made: (proof: String, token: AccessToken)
        let kept = nonce == nil ? proofs.nonce : nil
        var nonce = nonce ?? kept
        do {
            do {
                made = try await proof(target, nonce: nonce)
            } catch TokendClientError.invalidParameter("nonce") where kept != nil {
                // A kept nonce tokend will not sign is forgotten, and this request goes without one: the
                // upstream answers it with a nonce of its own rather than every request failing on the old.
                if let kept { proofs.forget(nonce: kept) }
                nonce = nil
                made = try await proof(target, nonce: nil)
            }
        } catch let error as TokendClientError {
            let refused = ProofRefused(error, session: session ?? "default")
            if refused.notDPoP {  // the session makes no proofs (any more): the next request asks GetToken
                proofs.bound = false
                forgetToken()
            }
            throw refused
        }
        remember(made.token, at: asked)
        let proof = RequestProof(jwt: made.proof, nonce: nonce, nonceRetry: nonceRetry)
        guard let answer = RequestCredentials(token: made.token, cookies: cookies, proof: proof) else { throw UnusableCredentials() }
        proofs.bound = answer.bound
        return answer
    }
}

extension Credentials {
    /// GetProof for `target` with `nonce`.
    private func proof(_ target: ProofTarget, nonce: String?) async throws -> (proof: String, token: AccessToken) {
        try await withTokend { client in
            try await client.proof(session: self.session, resource: self.resource, method: target.method, url: target.htu, nonce: nonce)
        }
    }
}

/// tokend made no proof for a request: the answer the client gets, and what kind of refusal it was (a
/// kind is logged at most once a minute, not for every request).
struct ProofRefused: Error, CustomStringConvertible {
    let kind: String
    let answer: Answer
    /// The session does not use DPoP (any more): its tokens are Bearer again.
    var notDPoP = false

    var description: String { answer.message }

    init(kind: String, answer: Answer, notDPoP: Bool = false) {
        self.kind = kind
        self.answer = answer
        self.notDPoP = notDPoP
    }

    init(_ error: TokendClientError, session: String) {
        if let refusal = error.proofRefusal {
            switch refusal.kind {
            case .notAvailable:
                self.init(
                    kind: "ProofNotAvailable",
                    answer: Answer(status: .serviceUnavailable, message: "tokend gives no DPoP proof for session \(refusal.session): \(refusal.reason)"),
                    notDPoP: true)
            case .keyUnavailable:
                self.init(
                    kind: "KeyUnavailable",
                    answer: Answer(status: .serviceUnavailable, message: "session \(refusal.session)'s DPoP key cannot sign: \(refusal.reason)"))
            }
            return
        }
        switch error {
        case .rateLimited(let session, let retryAfter):
            self.init(
                kind: "RateLimited",
                answer: Answer(
                    status: .serviceUnavailable,
                    message: "tokend bounds this user's DPoP proofs for session \(session) (GetProof) and this request is over the bound; retry in \(retryAfter) s",
                    retryAfter: retryAfter))
        case .invalidParameter(let name):
            self.init(
                kind: "InvalidParameter \(name)",
                answer: .badRequest(
                    name == "url"
                        ? "tokend makes no DPoP proof for this request's URL: GetProof signs only for URLs within session \(session)'s "
                            + "resources or proof-targets, or its provider's userinfo endpoint, never for the provider's own endpoints; "
                            + "to allow it, add the upstream (or a URL it is under) to proof-targets in [sessions.\(session)] of tokend.toml"
                        : "tokend makes no DPoP proof for this request: its \(name) cannot be named in one"))
        default:
            self.init(kind: "\(error)", answer: .tokendFailed(error))
        }
    }

    static func scoped(session: String) -> ProofRefused {
        ProofRefused(
            kind: "scope",
            answer: Answer(
                status: .serviceUnavailable,
                message: "session \(session)'s tokens are DPoP-bound, and tokend gives proofs only for the session's own scope: run the proxy without --scope"))
    }
}
