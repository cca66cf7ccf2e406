import TokendInterface
import Varlink

/// AddSession's answer: the session as added (its status, with `owner`), the
/// authorization server found, and the client it logs in as.
public typealias AddedSession = BrokerInterface.AddSession.Out

extension TokendClient {
    /// Adds a session of the caller's own (tokend.toml's [user-sessions] says who may). With
    /// `resources` alone, tokend discovers the rest: the first resource's challenge and metadata
    /// (RFC 9728), the authorization server's metadata, and a client registered for it (RFC 7591)
    /// when `clientId` is nil. `name` is the bare name; its full name is USER/NAME.
    public func addSession(
        name: String, issuer: String? = nil, clientId: String? = nil, resources: [String]? = nil, scope: String? = nil,
        dpop: Bool? = nil
    ) async throws(TokendClientError) -> AddedSession {
        try await call(
            "AddSession",
            I.AddSession.In(name: name, issuer: issuer, clientId: clientId, resources: resources, scope: scope, dpop: dpop),
            I.AddSession.Out.self)
    }

    /// Forgets a session a user added, its tokens revoked at the provider first unless `revoke` is false;
    /// returns whether the provider took the revocation. Its owner may, and tokend's administrators.
    @discardableResult
    public func removeSession(_ session: String, revoke: Bool = true) async throws(TokendClientError) -> Bool {
        try await call("RemoveSession", I.RemoveSession.In(session: session, revoke: revoke), I.RemoveSession.Out.self).revoked
    }
}
