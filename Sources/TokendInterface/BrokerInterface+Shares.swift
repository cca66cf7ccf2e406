import Varlink

/// Shares: a socket of its own for one session's token calls (CreateShare, ListShares, RevokeShare).
extension BrokerInterface {
    public struct Share: Codable, Sendable, Equatable {
        public var path: String
        public var session: String
        public var resources: [String]
        public var scope: String?
        public var expiresAt: Int
        public var connections: Int
        public var mode: Int

        public init(
            path: String, session: String, resources: [String], scope: String?, expiresAt: Int, connections: Int, mode: Int
        ) {
            self.path = path
            self.session = session
            self.resources = resources
            self.scope = scope
            self.expiresAt = expiresAt
            self.connections = connections
            self.mode = mode
        }
    }

    public enum CreateShare {
        public struct In: Codable, Sendable {
            public var path: String
            public var session: String?
            public var resources: [String]?
            public var scope: String?
            public var ttl: Int?
            /// The socket file's mode, as the caller made it.
            public var mode: Int?
            public init(
                path: String, session: String? = nil, resources: [String]? = nil, scope: String? = nil, ttl: Int? = nil,
                mode: Int? = nil
            ) {
                self.path = path
                self.session = session
                self.resources = resources
                self.scope = scope
                self.ttl = ttl
                self.mode = mode
            }
        }
        public struct Out: Codable, Sendable {
            public var share: Share
            public init(share: Share) { self.share = share }
        }
    }

    public enum ListShares {
        public typealias In = Empty
        public struct Out: Codable, Sendable {
            public var shares: [Share]
            public init(shares: [Share]) { self.shares = shares }
        }
    }

    public enum RevokeShare {
        public struct In: Codable, Sendable {
            public var path: String
            public init(path: String) { self.path = path }
        }
        public typealias Out = Empty
    }

    public enum ExpectDescriptor {
        public typealias In = Empty
        public typealias Out = Empty
    }
}
