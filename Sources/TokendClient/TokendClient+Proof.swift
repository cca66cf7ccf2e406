import TokendInterface
import Varlink

extension TokendClient {
    /// A DPoP proof (RFC 9449) for one request to a resource server, and the
    /// current token it is bound to: send `Authorization: DPoP <token>` and
    /// `DPoP: <proof>` with that request, and a new proof with every request.
    /// `nonce`: the server's DPoP-Nonce after it asked for one (401 use_dpop_nonce).
    public func proof(
        session: String? = nil, resource: String? = nil, method: String, url: String, nonce: String? = nil,
        page: String? = nil
    ) async throws(TokendClientError) -> (proof: String, token: AccessToken) {
        let out = try await call(
            "GetProof",
            I.GetProof.In(session: session, resource: resource, method: method, url: url, nonce: nonce, page: page),
            I.GetProof.Out.self)
        return (out.proof, out.token)
    }
}

/// A DPoP session's key as status shows it (SessionStatus.dpop).
public typealias DPoPStatus = BrokerInterface.DPoPStatus

extension AccessToken {
    /// The provider bound this token to tokend's DPoP key: it is useless
    /// without a proof of that key on each request (GetProof).
    /// (RFC 9449 §7.1: the token type's case is not significant. Only ASCII D, P
    /// and O lowercase to d, p and o, so this is the ASCII comparison.)
    public var isDPoPBound: Bool { tokenType.lowercased() == "dpop" }
}

/// GetProof's own refusals: the session makes no proofs (ProofNotAvailable),
/// or its key cannot sign here (KeyUnavailable); `reason` says why and what to do.
public struct ProofRefusal: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case notAvailable
        case keyUnavailable
    }

    public let kind: Kind
    public let session: String
    public let reason: String
}

extension TokendClientError {
    /// GetProof's own refusal, when this is one.
    public var proofRefusal: ProofRefusal? {
        guard case .failed(let error) = self else { return nil }
        let kind: ProofRefusal.Kind
        switch error.name {
        case BrokerInterface.Error.proofNotAvailable: kind = .notAvailable
        case BrokerInterface.Error.keyUnavailable: kind = .keyUnavailable
        default: return nil
        }
        return ProofRefusal(
            kind: kind, session: error.parameters["session"]?.stringValue ?? "", reason: error.parameters["reason"]?.stringValue ?? "")
    }
}
