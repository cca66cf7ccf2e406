/// One stored cookie (RFC 6265 §5.3), as the jar keeps it.
public struct Cookie: Sendable, Equatable, Codable {
    public var name: String
    public var value: String
    /// The canonical host (host-only) or the Domain attribute, lowercase, without a leading dot.
    public var domain: String
    public var hostOnly: Bool
    public var path: String
    /// Unix seconds; nil for a session cookie (kept until the session ends).
    public var expiresAt: Int?
    public var secure: Bool
    public var httpOnly: Bool
    public var sameSite: SameSite?
    /// Creation order within the jar; kept when a cookie is replaced (§5.3 step 11.3).
    public var creationIndex: Int

    public init(
        name: String, value: String, domain: String, hostOnly: Bool, path: String, expiresAt: Int?,
        secure: Bool, httpOnly: Bool, sameSite: SameSite?, creationIndex: Int
    ) {
        self.name = name
        self.value = value
        self.domain = domain
        self.hostOnly = hostOnly
        self.path = path
        self.expiresAt = expiresAt
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.creationIndex = creationIndex
    }

    /// Same name, domain and path: a new cookie with this identity replaces the old one.
    func sameIdentity(as other: Cookie) -> Bool {
        name == other.name && domain == other.domain && path == other.path
    }

    func isExpired(now: Int) -> Bool {
        expiresAt.map { $0 <= now } ?? false
    }

    /// The cookie's size for the per-cookie limit: name plus value, in bytes.
    var size: Int { name.utf8.count + value.utf8.count }
}

/// RFC 6265bis SameSite values.
public enum SameSite: String, Sendable, Codable, CaseIterable {
    case strict = "Strict"
    case lax = "Lax"
    case none = "None"
}

/// One change to a jar: what subscribers are told.
public struct CookieChange: Sendable, Equatable {
    public enum Action: String, Sendable {
        case set
        case delete
    }

    public var action: Action
    public var cookie: Cookie
    /// The jar's version after this change.
    public var version: Int

    public init(action: Action, cookie: Cookie, version: Int) {
        self.action = action
        self.cookie = cookie
        self.version = version
    }
}
