import TokendInterface

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
    public var isDPoPBound: Bool { tokenType.caseInsensitiveCompare("DPoP") == .orderedSame }
}
