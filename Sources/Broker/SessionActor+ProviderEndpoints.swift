#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import OAuth

extension SessionActor {
    /// The provider's own endpoints for this session, configured or
    /// discovered: token, pushed authorization, revocation, device
    /// authorization, introspection and authorization, and the RFC 8705
    /// mTLS aliases of any of them the provider lists. A proof for one of
    /// them is a proof to use the grant with, which only the session makes.
    /// nil while the token endpoint is not known (discovery has not run).
    public nonisolated var providerEndpointURLs: [URL]? {
        guard let http = endpoint as? HTTPTokenEndpoint else { return endpoint.tokenURL.map { [$0] } }
        let known = http.current
        guard let token = known.token else { return nil }
        return [token] + [known.pushedAuthorization, known.revocation, known.deviceAuthorization, known.introspection, known.authorization]
            .compactMap { $0 } + known.mtlsAliases
    }

    /// The provider's userinfo endpoint, configured or discovered: a resource server proofs are made for.
    public nonisolated var userinfoEndpointURL: URL? {
        (endpoint as? HTTPTokenEndpoint)?.current.userinfo
    }
}
