import Varlink

/// An access token as tokend hands it out.
public struct AccessToken: Sendable, Equatable {
    public var accessToken: String
    public var tokenType: String
    public var expiresAt: Int
    public var generation: Int
    public var scope: String?

    /// "Bearer <token>" (the token type as the server named it).
    public var authorizationHeaderValue: String { "\(tokenType.isEmpty ? "Bearer" : tokenType) \(accessToken)" }

    init(_ json: JSONValue?) throws(TokendClientError) {
        guard let object = json?.objectValue, let access = object["accessToken"]?.stringValue,
            let expiresAt = object["expiresAt"]?.intValue, let generation = object["generation"]?.intValue
        else { throw TokendClientError.malformedReply("token") }
        self.accessToken = access
        self.tokenType = object["tokenType"]?.stringValue ?? "Bearer"
        self.expiresAt = expiresAt
        self.generation = generation
        self.scope = object["scope"]?.stringValue
    }
}

/// A session's status; `json` keeps the reply as sent, for `--json` output.
public struct SessionStatus: Sendable {
    public var session: String
    public var state: String
    public var generation: Int
    public var expiresAt: Int?
    public var lastRefreshAt: Int?
    public var nextRefreshAt: Int?
    public var refreshes: Int
    public var coalesced: Int
    public var failures: Int
    public var lastError: String?
    /// Who is logged in, when the provider said (OpenID Connect).
    public var subject: String?
    public var username: String?
    public var email: String?
    /// Hosts whose git credentials this session answers, and the git user name.
    public var gitHosts: [String]
    public var gitUsername: String?
    /// Shared sessions only: this host's id, the store's state, the fleet copy's version.
    public var hostID: String?
    public var store: String?
    public var sharedVersion: Int?
    public var json: JSONValue

    init(_ json: JSONValue?) throws(TokendClientError) {
        guard let json, let object = json.objectValue, let session = object["session"]?.stringValue,
            let state = object["state"]?.stringValue
        else { throw TokendClientError.malformedReply("status") }
        self.session = session
        self.state = state
        self.generation = object["generation"]?.intValue ?? 0
        self.expiresAt = object["expiresAt"]?.intValue
        self.lastRefreshAt = object["lastRefreshAt"]?.intValue
        self.nextRefreshAt = object["nextRefreshAt"]?.intValue
        self.refreshes = object["refreshes"]?.intValue ?? 0
        self.coalesced = object["coalesced"]?.intValue ?? 0
        self.failures = object["failures"]?.intValue ?? 0
        self.lastError = object["lastError"]?.stringValue
        self.subject = object["subject"]?.stringValue
        self.username = object["username"]?.stringValue
        self.email = object["email"]?.stringValue
        self.gitHosts = object["gitHosts"]?.arrayValue?.compactMap(\.stringValue) ?? []
        self.gitUsername = object["gitUsername"]?.stringValue
        self.hostID = object["hostId"]?.stringValue
        self.store = object["store"]?.stringValue
        self.sharedVersion = object["sharedVersion"]?.intValue
        self.json = json
    }
}

/// A login begun with BeginLogin: what the user needs to approve it.
public struct PendingLogin: Sendable {
    public var id: String
    public var session: String
    public var flow: String
    public var expiresAt: Int
    public var userCode: String?
    public var verificationURI: String?
    public var verificationURIComplete: String?
    public var interval: Int?
    public var authorizationURL: String?

    init(_ json: JSONValue?) throws(TokendClientError) {
        guard let o = json?.objectValue, let id = o["id"]?.stringValue, let flow = o["flow"]?.stringValue,
            let expiresAt = o["expiresAt"]?.intValue
        else { throw .malformedReply("pending login") }
        self.id = id
        self.session = o["session"]?.stringValue ?? ""
        self.flow = flow
        self.expiresAt = expiresAt
        self.userCode = o["userCode"]?.stringValue
        self.verificationURI = o["verificationUri"]?.stringValue
        self.verificationURIComplete = o["verificationUriComplete"]?.stringValue
        self.interval = o["interval"]?.intValue
        self.authorizationURL = o["authorizationUrl"]?.stringValue
    }
}

/// One Subscribe reply: "status" first, then loggedIn, refreshed,
/// loginRequired, loggedOut, and "stopped" when tokend shuts down.
public struct SessionEvent: Sendable {
    public var event: String
    public var session: String
    public var generation: Int
    public var expiresAt: Int?
    public var reason: String?
    public var json: JSONValue

    init(_ object: JSONObject) {
        event = object["event"]?.stringValue ?? ""
        session = object["session"]?.stringValue ?? ""
        generation = object["generation"]?.intValue ?? 0
        expiresAt = object["expiresAt"]?.intValue
        reason = object["reason"]?.stringValue
        json = .object(object)
    }
}

/// A cookie of the session's jar, as GetCookies returns it.
public struct Cookie: Sendable, Equatable {
    public var name: String
    public var value: String
    public var domain: String
    public var hostOnly: Bool
    public var path: String
    public var expiresAt: Int?
    public var secure: Bool
    public var httpOnly: Bool
    public var sameSite: String?

    init(_ value: JSONValue?) throws(TokendClientError) {
        guard let o = value?.objectValue, let name = o["name"]?.stringValue, let v = o["value"]?.stringValue,
            let domain = o["domain"]?.stringValue, let path = o["path"]?.stringValue
        else { throw .malformedReply("cookie") }
        self.name = name
        self.value = v
        self.domain = domain
        self.hostOnly = o["hostOnly"]?.boolValue ?? false
        self.path = path
        self.expiresAt = o["expiresAt"]?.intValue
        self.secure = o["secure"]?.boolValue ?? false
        self.httpOnly = o["httpOnly"]?.boolValue ?? false
        self.sameSite = o["sameSite"]?.stringValue
    }
}

/// GetCookies' answer.
public struct CookieSet: Sendable {
    public var cookies: [Cookie]
    /// Exactly the Cookie header a browser would send ("" when none).
    public var header: String
    public var version: Int
    public var json: JSONValue

    init(_ reply: JSONObject) throws(TokendClientError) {
        guard let list = reply["cookies"]?.arrayValue, let header = reply["header"]?.stringValue,
            let version = reply["version"]?.intValue
        else { throw .malformedReply("GetCookies reply") }
        var cookies: [Cookie] = []
        for element in list { cookies.append(try Cookie(element)) }
        self.cookies = cookies
        self.header = header
        self.version = version
        self.json = .object(reply)
    }
}
