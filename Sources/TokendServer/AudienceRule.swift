import Broker
import TokendInterface
import UnixServer
import Varlink

/// The one check every token tokend hands out passes, whatever path it takes
/// (GetToken, Refresh, the fast path, GetProof): the resources the token's
/// audience covers (Token.audience: what the provider confirmed, else every
/// resource of the grant) must all be ones the caller may have
/// (resource-access) and, for a page's call, ones pages may have
/// (web-resources). The name the caller asked for does not enter into it.
struct AudienceRule {
    let policy: AccessPolicy

    /// nil when `peer` may have `token` (as a page of `page`, when set); else why not.
    func refusal(of token: Token, session: SessionActor, peer: PeerCredentials?, page: String?) -> BrokerError? {
        refusal(of: token.audience, named: token.resource, session: session, peer: peer, page: page)
    }

    /// The same for a token covering `audience`, asked for by the name `named`.
    func refusal(
        of audience: [String], named: String?, session: SessionActor, peer: PeerCredentials?, page: String?
    ) -> BrokerError? {
        let name = session.name
        if let page {
            guard session.webOrigins.contains(page) else {
                return .resourceNotAllowed(
                    name, resource: named ?? "",
                    "pages of \(page) may not use session \(name): the origin is not one of its web-origins (tokend.toml)")
            }
            let web = session.keyPolicy.webResources
            if let outside = audience.first(where: { !web.contains($0) }) {
                return .resourceNotAllowed(
                    name, resource: outside,
                    "pages may have tokens only for web-resources, and the token for this call covers \(outside) "
                        + Self.howKnown)
            }
        }
        if policy.resources[name] != nil,
            let denied = audience.first(where: { !policy.allows(peer, resource: $0, session: name) })
        {
            return .resourceNotAllowed(
                name, resource: denied,
                "this user may not have tokens for \(denied) (resource-access in tokend.toml), and the token for this "
                    + "call covers it " + Self.howKnown)
        }
        return nil
    }

    /// Whether a refusal needs to look at the token at all: a page's call, or a session with resource-access rules.
    func applies(to session: String, page: String?) -> Bool {
        page != nil || policy.resources[session] != nil
    }

    static let howKnown = "(a token's audience is what the provider confirmed, else every resource of the grant)"
}

extension AudienceRule {
    /// `status` with who resource-access lets have each resource's tokens.
    func described(_ status: BrokerInterface.SessionStatus) -> BrokerInterface.SessionStatus {
        var status = status
        status.resourceAccess = (policy.resourceAccess[status.session] ?? [:]).sorted { $0.key < $1.key }.map {
            BrokerInterface.ResourceAccess(resource: $0.key, users: $0.value.readUsers ?? [], groups: $0.value.readGroups ?? [])
        }
        return status
    }
}
