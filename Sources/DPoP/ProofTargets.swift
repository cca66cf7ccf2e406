/// The URLs a session's key signs proofs for (GetProof): an allow-list,
/// never a guess. A URL gets a proof when its host is written plainly
/// (TargetURL.hostProblem), its path cannot be resolved elsewhere
/// (TargetURL.pathProblem), it is none of the provider's own endpoints, and
/// it is within one of `within` or is one of `exactly`, compared in RFC
/// 3986's normal form. The provider's endpoints are refused even when
/// listed: a proof for one would let whoever holds a copy of the refresh
/// token use the grant with the session's key, which binding it prevents.
public struct ProofTargets: Sendable {
    /// URLs a target may be or be under (resources, proof-targets; a page's web-resources).
    public let within: [TargetURL]
    /// URLs a target may only be (the provider's userinfo endpoint).
    public let exactly: [TargetURL]
    /// The provider's own endpoints, by TargetURL.endpointKey.
    let never: Set<String>
    /// Configured entries no proof is made under, each with why (not an http(s) URL, a host not plain).
    public let unusable: [(entry: String, problem: String)]

    /// `within` and `exactly` as configured or discovered; `never`: the provider's endpoints, mTLS aliases
    /// included. An entry that is not a plain http(s) URL allows nothing (`unusable` says which);
    /// one of `never` that cannot be parsed refuses nothing, as no target can be it.
    public init(within: [String], exactly: [String] = [], never: [String]) {
        var unusable: [(String, String)] = []
        func usable(_ entries: [String]) -> [TargetURL] {
            entries.compactMap { entry in
                do throws(ProofError) {
                    let url = try TargetURL(entry)
                    if let problem = url.hostProblem ?? url.pathProblem {
                        unusable.append((entry, problem))
                        return nil
                    }
                    return url
                } catch {
                    unusable.append((entry, error.description))
                    return nil
                }
            }
        }
        self.within = usable(within)
        self.exactly = usable(exactly)
        self.never = Set(never.compactMap { try? TargetURL($0).endpointKey })
        self.unusable = unusable
    }

    /// Why no proof is made for `target`; nil when one is.
    public func refusal(of target: TargetURL) -> Refusal? {
        if let problem = target.hostProblem { return Refusal(kind: .host, reason: problem) }
        if never.contains(target.endpointKey) {
            return Refusal(kind: .providerEndpoint, reason: "the URL is one of the provider's own endpoints")
        }
        if let problem = target.pathProblem { return Refusal(kind: .path, reason: problem) }
        let normalized = target.normalized
        if within.contains(where: target.isWithin) || exactly.contains(where: { $0.normalized == normalized }) { return nil }
        return Refusal(kind: .notListed, reason: "\(target.htu) is not within any URL proofs are allowed for")
    }

    /// A target refused, and why.
    public struct Refusal: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            /// The host is not written plainly (TargetURL.hostProblem).
            case host
            /// The path may be resolved elsewhere (TargetURL.pathProblem).
            case path
            /// One of the provider's own endpoints, whatever the lists say.
            case providerEndpoint
            /// Within none of the allowed URLs.
            case notListed
        }

        public let kind: Kind
        public let reason: String
    }
}
