import Varlink

/// The interface's types and every method's parameters and reply, declared
/// once: the server encodes them, TokendClient and the native host decode
/// them, and a test checks them member by member against
/// io.tokend.Broker.varlink. They travel as JSONValue (`JSONValue(encoding:)`,
/// `decode`); an absent optional is sent as null.
extension BrokerInterface {
    public struct Token: Codable, Sendable, Equatable {
        public var accessToken: String
        public var tokenType: String
        public var expiresAt: Int
        /// Grows by one with every successful refresh.
        public var generation: Int
        public var scope: String?
        public var resource: String?

        public init(
            accessToken: String, tokenType: String, expiresAt: Int, generation: Int, scope: String?, resource: String? = nil
        ) {
            self.accessToken = accessToken
            self.tokenType = tokenType
            self.expiresAt = expiresAt
            self.generation = generation
            self.scope = scope
            self.resource = resource
        }

        /// "Bearer <token>" (the token type as the server named it).
        public var authorizationHeaderValue: String { "\(tokenType.isEmpty ? "Bearer" : tokenType) \(accessToken)" }
    }

    public struct PendingLogin: Codable, Sendable, Equatable {
        public var id: String
        public var session: String
        /// "device" or "browser"
        public var flow: String
        public var expiresAt: Int
        public var userCode: String?
        public var verificationUri: String?
        public var verificationUriComplete: String?
        public var interval: Int?
        public var authorizationUrl: String?

        public init(id: String, session: String, flow: String, expiresAt: Int) {
            self.id = id
            self.session = session
            self.flow = flow
            self.expiresAt = expiresAt
        }
    }

    /// One Subscribe reply: "status" first, then cookies, loggedIn, refreshed,
    /// loginPending, loginRequired, loggedOut, and "stopped" when tokend shuts down.
    public struct Event: Codable, Sendable, Equatable {
        public var event: String
        public var session: String
        public var generation: Int
        public var expiresAt: Int?
        public var reason: String?
        /// The jar's version after this event.
        public var version: Int?
        public var changes: [CookieChange]?
        public var snapshot: Bool?
        public var login: String?
        public var resource: String?
        public var scope: String?

        public init(event: String, session: String, generation: Int) {
            self.event = event
            self.session = session
            self.generation = generation
        }

        /// Only what the event carries: members that do not apply to it are left out.
        public func encode(to encoder: Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(event, forKey: .event)
            try container.encode(session, forKey: .session)
            try container.encode(generation, forKey: .generation)
            try container.encodeIfPresent(expiresAt, forKey: .expiresAt)
            try container.encodeIfPresent(reason, forKey: .reason)
            try container.encodeIfPresent(version, forKey: .version)
            if let changes { try container.encode(changes, forKey: .changes) }
            if let snapshot { try container.encode(snapshot, forKey: .snapshot) }
            if let login { try container.encode(login, forKey: .login) }
            try container.encodeIfPresent(resource, forKey: .resource)
            try container.encodeIfPresent(scope, forKey: .scope)
        }
    }

    /// A method's parameters (`In`) and reply (`Out`); a method without
    /// parameters or reply members uses `Empty`.
    public struct Empty: Codable, Sendable, Equatable {
        public init() {}
    }

    public struct SessionOnly: Codable, Sendable, Equatable {
        public var session: String?
        public init(session: String? = nil) { self.session = session }
    }

    public enum GetToken {
        public struct In: Codable, Sendable {
            public var session: String?
            public var minValidSeconds: Int?
            public var resource: String?
            public var scope: String?
            /// The web origin of the page the call is made for (set by the browser bridge and web views).
            public var page: String?
            public init(
                session: String? = nil, minValidSeconds: Int? = nil, resource: String? = nil, scope: String? = nil,
                page: String? = nil
            ) {
                self.session = session
                self.minValidSeconds = minValidSeconds
                self.resource = resource
                self.scope = scope
                self.page = page
            }
        }
        public struct Out: Codable, Sendable {
            public var token: Token
            public init(token: Token) { self.token = token }
        }
    }

    public enum Refresh {
        public struct In: Codable, Sendable {
            public var session: String?
            public var staleGeneration: Int?
            public var resource: String?
            public var scope: String?
            /// As GetToken's.
            public var page: String?
            public init(
                session: String? = nil, staleGeneration: Int? = nil, resource: String? = nil, scope: String? = nil,
                page: String? = nil
            ) {
                self.session = session
                self.staleGeneration = staleGeneration
                self.resource = resource
                self.scope = scope
                self.page = page
            }
        }
        public typealias Out = GetToken.Out
    }

    public enum GetProof {
        public struct In: Codable, Sendable {
            public var session: String?
            public var resource: String?
            /// The request's method and URL (the proof's htm and htu).
            public var method: String
            public var url: String
            /// The resource server's DPoP-Nonce, when it sent one.
            public var nonce: String?
            public var page: String?
            public init(
                session: String? = nil, resource: String? = nil, method: String, url: String, nonce: String? = nil,
                page: String? = nil
            ) {
                self.session = session
                self.resource = resource
                self.method = method
                self.url = url
                self.nonce = nonce
                self.page = page
            }
        }
        public struct Out: Codable, Sendable {
            public var proof: String
            public var token: Token
            public init(proof: String, token: Token) {
                self.proof = proof
                self.token = token
            }
        }
    }

    public enum ResetStrategy {
        public typealias In = SessionOnly
        public typealias Out = GetStatus.Out
    }

    public enum GetStatus {
        public typealias In = SessionOnly
        public struct Out: Codable, Sendable {
            public var status: SessionStatus
            public init(status: SessionStatus) { self.status = status }
        }
    }

    public enum ListSessions {
        public typealias In = Empty
        public struct Out: Codable, Sendable {
            public var sessions: [SessionStatus]
            public init(sessions: [SessionStatus]) { self.sessions = sessions }
        }
    }

    public enum GetMetrics {
        public typealias In = Empty
        public struct Out: Codable, Sendable {
            public var text: String
            public init(text: String) { self.text = text }
        }
    }

    public enum Login {
        public struct In: Codable, Sendable {
            public var session: String?
            public var refreshToken: String
            public init(session: String? = nil, refreshToken: String) {
                self.session = session
                self.refreshToken = refreshToken
            }
        }
        public typealias Out = GetStatus.Out
    }

    public enum BeginLogin {
        public struct In: Codable, Sendable {
            public var session: String?
            public var flow: String
            public var redirectUri: String?
            public init(session: String? = nil, flow: String, redirectUri: String? = nil) {
                self.session = session
                self.flow = flow
                self.redirectUri = redirectUri
            }
        }
        public struct Out: Codable, Sendable {
            public var login: PendingLogin
            public init(login: PendingLogin) { self.login = login }
        }
    }

    public enum FinishLogin {
        public struct In: Codable, Sendable {
            public var id: String
            public var callbackUrl: String?
            public init(id: String, callbackUrl: String? = nil) {
                self.id = id
                self.callbackUrl = callbackUrl
            }
        }
        public typealias Out = GetStatus.Out
    }

    public enum CancelLogin {
        public struct In: Codable, Sendable {
            public var id: String
            public init(id: String) { self.id = id }
        }
        public typealias Out = Empty
    }

    public enum Logout {
        public struct In: Codable, Sendable {
            public var session: String?
            public var revoke: Bool?
            public init(session: String? = nil, revoke: Bool? = nil) {
                self.session = session
                self.revoke = revoke
            }
        }
        public typealias Out = Empty
    }

    public enum Subscribe {
        public struct In: Codable, Sendable {
            public var session: String?
            public var sinceVersion: Int?
            public var resource: String?
            public var scope: String?
            public init(session: String? = nil, sinceVersion: Int? = nil, resource: String? = nil, scope: String? = nil) {
                self.session = session
                self.sinceVersion = sinceVersion
                self.resource = resource
                self.scope = scope
            }
        }
        public typealias Out = Event
    }

    /// Every method: its parameters, its reply, and whether it streams.
    public static var methods: [String: (parameters: any Codable.Type, reply: any Codable.Type, streams: Bool)] { [
        "GetToken": (GetToken.In.self, GetToken.Out.self, false),
        "Refresh": (Refresh.In.self, Refresh.Out.self, false),
        "GetProof": (GetProof.In.self, GetProof.Out.self, false),
        "ResetStrategy": (ResetStrategy.In.self, ResetStrategy.Out.self, false),
        "CreateShare": (CreateShare.In.self, CreateShare.Out.self, false),
        "ListShares": (ListShares.In.self, ListShares.Out.self, false),
        "GetAccess": (GetAccess.In.self, GetAccess.Out.self, false),
        "RevokeShare": (RevokeShare.In.self, RevokeShare.Out.self, false),
        "ExpectDescriptor": (ExpectDescriptor.In.self, ExpectDescriptor.Out.self, false),
        "AddSession": (AddSession.In.self, AddSession.Out.self, false),
        "RemoveSession": (RemoveSession.In.self, RemoveSession.Out.self, false),
        "GetStatus": (GetStatus.In.self, GetStatus.Out.self, false),
        "ListSessions": (ListSessions.In.self, ListSessions.Out.self, false),
        "GetMetrics": (GetMetrics.In.self, GetMetrics.Out.self, false),
        "Login": (Login.In.self, Login.Out.self, false),
        "BeginLogin": (BeginLogin.In.self, BeginLogin.Out.self, false),
        "FinishLogin": (FinishLogin.In.self, FinishLogin.Out.self, false),
        "CancelLogin": (CancelLogin.In.self, CancelLogin.Out.self, false),
        "Logout": (Logout.In.self, Logout.Out.self, false),
        "GetCookies": (GetCookies.In.self, GetCookies.Out.self, false),
        "ImportCookies": (ImportCookies.In.self, ImportCookies.Out.self, false),
        "DeleteCookies": (DeleteCookies.In.self, DeleteCookies.Out.self, false),
        "ExportCookies": (ExportCookies.In.self, ExportCookies.Out.self, false),
        "Subscribe": (Subscribe.In.self, Subscribe.Out.self, true),
    ] }
}

extension Encodable {
    /// The record as a Varlink parameters object.
    public func parameters() throws -> JSONObject {
        try JSONValue(encoding: self).objectValue ?? [:]
    }
}
