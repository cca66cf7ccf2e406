import Varlink

/// Sessions users add at run time (AddSession, RemoveSession): each belongs to
/// the person who added it; its full name is USER/NAME.
extension BrokerInterface {
    public enum AddSession {
        public struct In: Codable, Sendable, Equatable {
            /// The name the owner gives it (letters, digits, '-', '_', '.'); its full name is USER/NAME.
            public var name: String
            public var issuer: String?
            /// nil: registered at the authorization server (RFC 7591).
            public var clientId: String?
            /// RFC 8707 resources; with no issuer, the first one's metadata names the authorization server.
            public var resources: [String]?
            public var scope: String?
            public var dpop: Bool?

            public init(
                name: String, issuer: String? = nil, clientId: String? = nil, resources: [String]? = nil,
                scope: String? = nil, dpop: Bool? = nil
            ) {
                self.name = name
                self.issuer = issuer
                self.clientId = clientId
                self.resources = resources
                self.scope = scope
                self.dpop = dpop
            }
        }
        public struct Out: Codable, Sendable {
            public var status: SessionStatus
            public var issuer: String
            public var clientId: String
            /// Whether tokend registered the client (RFC 7591).
            public var registered: Bool

            public init(status: SessionStatus, issuer: String, clientId: String, registered: Bool) {
                self.status = status
                self.issuer = issuer
                self.clientId = clientId
                self.registered = registered
            }
        }
    }

    public enum RemoveSession {
        public struct In: Codable, Sendable {
            public var session: String
            /// false: forget without revoking at the provider (default: revoke).
            public var revoke: Bool?
            public init(session: String, revoke: Bool? = nil) {
                self.session = session
                self.revoke = revoke
            }
        }
        public struct Out: Codable, Sendable {
            /// Whether the provider took the revocation of its refresh token.
            public var revoked: Bool
            public init(revoked: Bool) { self.revoked = revoked }
        }
    }
}
