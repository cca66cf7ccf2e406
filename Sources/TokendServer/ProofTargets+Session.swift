import Broker
import DPoP

extension ProofTargets {
    /// What `session` signs for: for a page (`page` set), URLs within the
    /// resource it names or, naming none, within one of the session's
    /// web-resources; for any other caller, URLs within one of its resources
    /// or proof-targets, and its provider's userinfo endpoint. Never the
    /// provider's own endpoints. nil while those are not known (discovery has
    /// not run): no proof is made until they are.
    init?(for session: SessionActor, resource: String?, page: String?) {
        guard let endpoints = session.providerEndpointURLs else { return nil }
        let policy = session.keyPolicy
        let never = endpoints.map(\.absoluteString)
        if page != nil {
            self.init(within: policy.webResources.filter { resource == nil || $0 == resource }, never: never)
        } else {
            self.init(
                within: policy.resources + policy.proofTargets, exactly: session.userinfoEndpointURL.map { [$0.absoluteString] } ?? [],
                never: never)
        }
    }
}

/// Why GetProof makes no proof for `target` for this caller, as the reason of its InvalidParameter
/// (url): what is refused and the key in tokend.toml that would allow it, if any. nil: it makes one.
func proofTargetRefusal(_ target: TargetURL, of session: SessionActor, resource: String?, page: String?) -> String? {
    let name = session.name
    guard let targets = ProofTargets(for: session, resource: resource, page: page) else {
        return "the provider's endpoints are not known yet, so no proof is made (try again once the session has refreshed)"
    }
    guard let refusal = targets.refusal(of: target) else { return nil }
    if page != nil {
        let within = resource ?? "one of session \(name)'s web-resources (tokend.toml)"
        return "a page may have proofs only for URLs within \(within); \(target.htu) is not: \(refusal.reason)"
    }
    switch refusal.kind {
    case .providerEndpoint:
        return "the URL is one of the provider's own endpoints for session \(name): only tokend makes proofs for those"
    case .host:
        return "no proof for \(target.htu): \(refusal.reason). tokend compares hosts as written: ask with the name "
            + "session \(name)'s resources or proof-targets (tokend.toml) list"
    case .path:
        return "no proof for \(target.htu): \(refusal.reason)"
    case .notListed:
        let unused = targets.unusable.filter { session.keyPolicy.proofTargets.contains($0.entry) }.map { " (\($0.entry) allows nothing: \($0.problem))" }.joined()
        return "\(target.htu) is not within session \(name)'s resources or proof-targets, nor its provider's userinfo "
            + "endpoint: add it, or a URL it is under, to proof-targets in [sessions.\(name)] of tokend.toml\(unused)"
    }
}
