import NIOCore

/// A DPoP request's answer (RFC 9449 §8, §9): the upstream's nonces kept, and
/// its request for one answered with one more proof.
extension ClientHandler {
    /// What an answer to a request with a proof asks of the proxy.
    enum ProofStep: Equatable {
        /// Nothing of DPoP's: a 401 leads to a refresh as for any token.
        case usual
        /// The request again, once, with a proof carrying this nonce (no refresh: the token is good).
        case retry(nonce: String)
        /// The 401 goes to the client as it came: a refresh would not help (the proof was refused, or
        /// the nonce asked cannot be sent).
        case relay
    }

    /// The answer's DPoP-Nonce is kept for the next proofs, whatever its status; a 401 use_dpop_nonce
    /// with a nonce this request's proof did not carry is retried once.
    func proofStep(_ head: ResponseHead, proof: RequestProof, of exchange: Exchange) -> ProofStep {
        let nonce = head.fields.named("dpop-nonce").last
        if let nonce { settings.credentials.proofs.keep(nonce: nonce) }
        guard head.status == 401 else { return .usual }
        switch DPoP.challengeError(head.fields.named("www-authenticate")) {
        case "use_dpop_nonce"?:
            guard let nonce, DPoP.isNonce(nonce), nonce != proof.nonce, !proof.nonceRetry, !exchange.streaming else {
                settings.logger.warning(
                    "the upstream asks a DPoP nonce the proxy cannot send again",
                    metadata: ["target": "\(exchange.url)", "reason": "\(Self.noRetry(nonce: nonce, proof: proof))"])
                return .relay
            }
            return .retry(nonce: nonce)
        case "invalid_dpop_proof"?:
            settings.logger.warning("the upstream refused the DPoP proof", metadata: ["target": "\(exchange.url)"])
            return .relay
        default:
            return .usual
        }
    }

    /// Why a use_dpop_nonce is not answered with the request again.
    static func noRetry(nonce: String?, proof: RequestProof) -> String {
        guard let nonce, DPoP.isNonce(nonce) else { return "no usable DPoP-Nonce in its answer" }
        if nonce == proof.nonce { return "the proof carried that nonce already" }
        if proof.nonceRetry { return "the request was sent again for a nonce once already" }
        return "the body streamed through and is not kept"
    }

    /// The 401 use_dpop_nonce is held while tokend makes a proof with the nonce; then the request goes
    /// again (no refresh). Its Set-Cookie reaches tokend, as a refreshed 401's does.
    func retry(_ exchange: Exchange, nonce: String, setCookie: [String]) {
        guard let old = exchange.credentials else { return }
        let credentials = settings.credentials
        let loop = pool.loop
        let url = exchange.url
        let target = exchange.proofTarget
        let bound = LoopBound((self, exchange), on: loop)
        Task {
            let next: Result<RequestCredentials, any Error>
            do {
                next = .success(try await credentials.prove(target, cookies: old.cookies, nonce: nonce, nonceRetry: true))
            } catch {
                next = .failure(error)
            }
            if !setCookie.isEmpty && credentials.cookieRule == .toJar { await credentials.importCookies(setCookie, from: url) }
            loop.execute {
                let (handler, exchange) = bound.value
                guard case .exchange(let current) = handler.phase, current === exchange else { return }
                handler.resend(exchange, next)
            }
        }
    }
}

extension HeadFields {
    /// The values of the fields named `name`, in any case (fields the parser has no kind for).
    func named(_ name: String) -> [String] {
        bytes.withUnsafeReadableBytes { p in section.values(named: name, in: p) }
    }
}
