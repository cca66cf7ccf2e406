/// A session's status as GetStatus, ListSessions and the other status
/// replies carry it (io.tokend.Broker.varlink's SessionStatus), with the
/// types it holds.
extension BrokerInterface {
    public struct SessionStatus: Codable, Sendable, Equatable {
        public var session: String
        /// active, refreshing, backingOff, loginRequired or loggedOut
        public var state: String
        public var generation: Int
        public var expiresAt: Int?
        public var expirySource: String?
        public var lastRefreshAt: Int?
        public var nextRefreshAt: Int?
        public var refreshes: Int
        public var coalesced: Int
        public var failures: Int
        public var lastError: String?
        public var cookies: Int
        public var cookieVersion: Int
        public var subject: String?
        public var username: String?
        public var email: String?
        public var pendingLogins: Int
        public var webOrigins: [String]
        public var gitHosts: [String]
        public var gitUsername: String?
        public var redirectUri: String?
        public var hostId: String?
        public var store: String?
        public var sharedVersion: Int?
        public var stateSince: Int?
        public var resources: [String] = []
        public var webResources: [String] = []
        public var strategy: String = "shared-audience"
        public var strategyReason: String = ""
        public var tokens: [KeyedToken] = []
        /// Who may have tokens for each resource resource-access limits.
        public var resourceAccess: [ResourceAccess] = []
        /// Whether pages can get this session's tokens: "none", "some" or "all"; and why.
        public var pageTokens: String = "all"
        public var pageTokensReason: String = ""
        /// The DPoP key, when the session uses DPoP.
        public var dpop: DPoPStatus?
        /// The login flows the endpoints allow ("device", "browser"); nil while discovery has not succeeded.
        public var loginFlows: [String]?
        /// A session a user added (AddSession): its owner's user name; nil for tokend.toml's sessions.
        public var owner: String?
        /// A session shared by a fleet: the store as this host sees it.
        public var fleet: FleetStatus?

        public init(session: String, state: String, generation: Int, refreshes: Int = 0, coalesced: Int = 0,
                    failures: Int = 0, cookies: Int = 0, cookieVersion: Int = 0, pendingLogins: Int = 0,
                    webOrigins: [String] = [], gitHosts: [String] = []) {
            self.session = session
            self.state = state
            self.generation = generation
            self.refreshes = refreshes
            self.coalesced = coalesced
            self.failures = failures
            self.cookies = cookies
            self.cookieVersion = cookieVersion
            self.pendingLogins = pendingLogins
            self.webOrigins = webOrigins
            self.gitHosts = gitHosts
        }
    }

    public struct ResourceAccess: Codable, Sendable, Equatable {
        public var resource: String
        public var users: [String]
        public var groups: [String]

        public init(resource: String, users: [String], groups: [String]) {
            self.resource = resource
            self.users = users
            self.groups = groups
        }
    }

    public struct DPoPStatus: Codable, Sendable, Equatable {
        /// The public key's RFC 7638 thumbprint.
        public var thumbprint: String?
        /// "tpm" or "state"
        public var keyStorage: String
        /// "verified", "unverified" or "none"
        public var binding: String
        public var problem: String?

        public init(thumbprint: String?, keyStorage: String, binding: String, problem: String? = nil) {
            self.thumbprint = thumbprint
            self.keyStorage = keyStorage
            self.binding = binding
            self.problem = problem
        }
    }

    public struct KeyedToken: Codable, Sendable, Equatable {
        public var resource: String?
        public var scope: String?
        public var generation: Int
        public var expiresAt: Int?
        public var lastError: String?

        public init(resource: String?, scope: String?, generation: Int, expiresAt: Int?, lastError: String?) {
            self.resource = resource
            self.scope = scope
            self.generation = generation
            self.expiresAt = expiresAt
            self.lastError = lastError
        }
    }

    /// A fleet session's store as this host sees it (see docs/fleet.md).
    public struct FleetStatus: Codable, Sendable, Equatable {
        /// "polling", "listening" or "notificationsLost" (listen=on, but none arrive: polling only).
        public var following: String
        public var pollInterval: Int
        /// Seconds since this host last read or wrote the fleet's copy.
        public var copyAge: Double?
        public var statements: Int
        public var connects: Int
        /// The last statement's round trip, seconds.
        public var lastRoundTrip: Double?
        /// The refresh lease as this host last saw it held.
        public var lease: FleetLease?
        /// Seconds the database's clock is ahead of this host's.
        public var clockOffset: Double?
        /// What this host found when it asked the store about itself.
        public var check: StoreCheck?

        public init(
            following: String, pollInterval: Int, copyAge: Double?, statements: Int, connects: Int,
            lastRoundTrip: Double?, lease: FleetLease?, clockOffset: Double? = nil, check: StoreCheck? = nil
        ) {
            self.clockOffset = clockOffset
            self.check = check
            self.following = following
            self.pollInterval = pollInterval
            self.copyAge = copyAge
            self.statements = statements
            self.connects = connects
            self.lastRoundTrip = lastRoundTrip
            self.lease = lease
        }
    }

    /// The store's role, the privileges it lacks on tokend's tables, and the pooler between (see docs/fleet.md).
    public struct StoreCheck: Codable, Sendable, Equatable {
        public var user: String
        public var missing: [MissingGrant]
        /// "direct", "transaction", "session" or "unknown".
        public var pooler: String
        /// Seconds since the check.
        public var age: Double

        public init(user: String, missing: [MissingGrant], pooler: String, age: Double) {
            self.user = user
            self.missing = missing
            self.pooler = pooler
            self.age = age
        }
    }

    public struct MissingGrant: Codable, Sendable, Equatable {
        public var table: String
        public var privileges: [String]

        public init(table: String, privileges: [String]) {
            self.table = table
            self.privileges = privileges
        }
    }

    public struct FleetLease: Codable, Sendable, Equatable {
        public var holder: String
        public var epoch: Int
        /// Seconds left.
        public var remaining: Double
        public var heldHere: Bool

        public init(holder: String, epoch: Int, remaining: Double, heldHere: Bool) {
            self.holder = holder
            self.epoch = epoch
            self.remaining = remaining
            self.heldHere = heldHere
        }
    }
}
