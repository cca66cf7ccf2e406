import Foundation
import OAuth

extension SessionActor {
    /// The provider's own endpoints for this session, configured or
    /// discovered: token, pushed authorization, revocation, device
    /// authorization, introspection and authorization. A proof for one of
    /// them is a proof to use the grant with, which only the session makes.
    /// nil while the token endpoint is not known (discovery has not run).
    public nonisolated var providerEndpointURLs: [URL]? {
        guard let http = endpoint as? HTTPTokenEndpoint else { return endpoint.tokenURL.map { [$0] } }
        let known = http.current
        guard let token = known.token else { return nil }
        return [token] + [known.pushedAuthorization, known.revocation, known.deviceAuthorization, known.introspection, known.authorization]
            .compactMap { $0 }
    }
}
