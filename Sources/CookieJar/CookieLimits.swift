/// What one session's jar holds at most, and the rules around it.
public struct CookiePolicy: Sendable {
    /// Name plus value, bytes (6265bis §5.6: 4096). Larger cookies are rejected.
    public var maximumCookieSize = 4096
    /// Cookies per domain; beyond it one of that domain is evicted, non-Secure
    /// ones first (`CookieJar.evictions`).
    public var maximumPerDomain = 50
    /// Cookies in the jar; beyond it one is evicted, non-Secure ones first.
    public var maximumTotal = 1000
    /// Expires/Max-Age are capped at this many seconds from now (6265bis: 400 days).
    public var maximumLifetime = 400 * 86_400
    /// Changes kept for subscribers that reconnect with sinceVersion.
    public var changeLogCapacity = 512
    public var publicSuffixes: PublicSuffixList
    /// Which cookies are stored at all (a web view's accept policy).
    public var accept: AcceptPolicy = .always

    public init(publicSuffixes: PublicSuffixList) {
        self.publicSuffixes = publicSuffixes
    }
}

/// Which Set-Cookie headers a session takes (as NSHTTPCookieStorage's accept policy).
public enum AcceptPolicy: String, Sendable, CaseIterable {
    case always
    case never
    /// Only cookies for exactly the host that set them: no Domain attribute
    /// naming a parent domain.
    case sameDomain = "same-domain"
}

/// Why a Set-Cookie header was not stored.
public struct CookieRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
    }

    static let unparseable = CookieRejection("not a cookie (empty name and value, or a control character)")
    static let tooLarge = CookieRejection("name and value exceed the cookie size limit")
    static let publicSuffix = CookieRejection("Domain is a public suffix")
    static let domainMismatch = CookieRejection("Domain does not match the request host")
    static let insecureOrigin = CookieRejection("Secure cookie from a non-secure origin")
    static let shadowsSecure = CookieRejection(
        "a non-secure origin may not replace or shadow a Secure cookie of the same name")
    static let noRoomBesideSecure = CookieRejection(
        "the jar is full and a non-secure origin may not evict a Secure cookie to make room")
    static let prefix = CookieRejection("__Secure-/__Host- prefix requirements not met")
    static let sameSiteNone = CookieRejection("SameSite=None without Secure")
    static let acceptNever = CookieRejection("the session does not accept cookies (accept-cookies = \"never\")")
    static let acceptSameDomain = CookieRejection(
        "Domain names a domain other than the setting host (accept-cookies = \"same-domain\")")
}
