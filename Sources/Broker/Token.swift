import CookieJar
import Secrets
import Synchronization

/// An access token as handed to callers. Never carries the refresh token.
public struct Token: Sendable, Equatable {
    public var accessToken: Secret
    public var tokenType: String
    public var expiresAt: Int
    public var generation: Int
    public var scope: String?
    /// The resource (RFC 8707) of the key the token is for, when one was named.
    public var resource: String? = nil
    /// The session's resources this token's audience covers: those the
    /// provider confirmed (its JWT `aud` or introspection), else every
    /// resource of the grant and of the configuration (fail closed). Empty for
    /// a session without resources. What access rules are checked against.
    public var audience: [String] = []
}

/// A keyed token as status shows it (never the token itself).
public struct KeyedTokenStatus: Sendable, Equatable {
    public var resource: String?
    public var scope: String?
    public var generation: Int
    public var expiresAt: Int?
    public var lastError: String?
}

/// What a session reports about itself.
public struct SessionStatus: Sendable, Equatable {
    public var session: String
    /// active, refreshing, backingOff, loginRequired or loggedOut.
    public var state: String
    public var generation: Int
    public var expiresAt: Int?
    /// expires_in, jwt or default.
    public var expirySource: String?
    public var lastRefreshAt: Int?
    public var nextRefreshAt: Int?
    public var refreshes: Int
    public var coalesced: Int
    public var failures: Int
    public var lastError: String?
    /// Cookies in the jar, and the jar's version.
    public var cookieCount: Int
    public var cookieVersion: Int
    /// Who is logged in, when the provider said (OpenID Connect).
    public var subject: String?
    public var username: String?
    public var email: String?
    /// Logins begun and not yet finished.
    public var pendingLogins: Int = 0
    /// Origins whose pages may use the session through the browser bridge.
    public var webOrigins: [String] = []
    public var gitHosts: [String] = []
    public var gitUsername: String?
    /// The exact loopback redirect URI browser logins use, when configured.
    public var redirectURI: String?
    /// Shared sessions: this host's id, and the store's state ("connected", or why it cannot be reached).
    public var hostID: String?
    public var store: String?
    /// The version of the fleet's copy this host has.
    public var sharedVersion: Int?
    /// The store as this host sees it: how it follows, its round trips, the copy's age, the lease.
    public var fleet: FleetStatus? = nil
    /// Since when the session has been in `state` (loginRequired, loggedOut, backingOff), Unix seconds.
    public var stateSince: Int?
    /// The resources the session serves tokens for.
    public var resources: [String] = []
    /// The resources web pages may ask for (web-resources).
    public var webResources: [String] = []
    /// How keyed tokens are refreshed ("shared-audience", "per-resource", "undetermined") and why.
    public var strategy = "shared-audience"
    public var strategyReason = ""
    public var tokens: [KeyedTokenStatus] = []
    /// The DPoP key, for a session with dpop (see SessionActor+DPoP).
    public var dpop: DPoPKeyStatus? = nil
    /// Whether pages can get this session's tokens ("none", "some", "all"), and why.
    public var pageTokens = "all"
    public var pageTokensReason = ""
    /// The login flows the endpoints allow ("device", "browser"); nil while not known (discovery pending).
    public var loginFlows: [String]? = nil
}

/// A change subscribers are told about.
public struct SessionEvent: Sendable {
    public enum Kind: String, Sendable {
        case loginPending, loggedIn, refreshed, loginRequired, loggedOut, cookies, strategyReset
    }
    public var kind: Kind
    public var session: String
    public var generation: Int
    public var expiresAt: Int?
    public var reason: String?
    /// The jar's version after this event.
    public var cookieVersion: Int
    /// For `cookies`: the changes, oldest first.
    public var changes: [CookieChange] = []
    /// For `cookies`: `changes` is the whole jar (all "set"), replacing what the subscriber had.
    public var snapshot = false
    /// For `loginPending`: the flow, "device" or "browser".
    public var loginFlow: String?
    /// For `refreshed`: the key whose token was refreshed (both nil: the session's own).
    public var resource: String?
    public var scope: String?
    /// Shared by every subscriber's copy: what the event encodes to, made once.
    public let memo = EventMemo()
}

/// A value made once and kept for every copy of an event (its wire form).
public final class EventMemo: Sendable {
    private let kept = Mutex<(any Sendable)?>(nil)

    public init() {}

    public func value<T: Sendable>(_ make: () throws -> T) rethrows -> T {
        if let known = kept.withLock({ $0 }) as? T { return known }
        let made = try make()
        kept.withLock { $0 = made }
        return made
    }
}

/// Why the broker could not answer.
public struct BrokerError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        case noSuchSession
        case loginRequired
        case upstreamUnavailable
        /// No pending login has that id (never begun, finished, cancelled, or begun by another user).
        case noSuchLogin
        /// The user or the server refused the login.
        case loginDenied
        /// The login ran out of time.
        case loginExpired
        /// A browser callback that does not answer this login; the login stays pending.
        case invalidCallback
        /// The login could not be completed (grant refused, ID token invalid, no refresh token).
        case loginFailed
        /// A shared session's store (PostgreSQL) cannot be reached: no refresh, login or logout until it can.
        case storeUnavailable
        /// The resource is not one the session serves, or not to this caller.
        case resourceNotAllowed
        /// The scope asks for more than the session's.
        case scopeNotAllowed
        /// The provider will not issue a token for this key (invalid_target, invalid_scope).
        case targetRefused
        /// The caller holds as many keys as one person may, or made new ones faster than its budget.
        case tooManyKeys
        /// The session has no endpoint for this login flow (device authorization, authorization).
        case flowUnavailable
    }
    public let code: Code
    public let session: String
    public let reason: String
    public let retryAfter: Int?
    /// The key a resource or scope error is about.
    public var resource: String? = nil
    public var scope: String? = nil

    public static func noSuchSession(_ session: String) -> BrokerError {
        BrokerError(code: .noSuchSession, session: session, reason: "no session named \"\(session)\" is configured", retryAfter: nil)
    }
    public static func loginRequired(_ session: String, _ reason: String) -> BrokerError {
        BrokerError(code: .loginRequired, session: session, reason: reason, retryAfter: nil)
    }
    public static func upstreamUnavailable(_ session: String, _ reason: String, retryAfter: Int?) -> BrokerError {
        BrokerError(code: .upstreamUnavailable, session: session, reason: reason, retryAfter: retryAfter)
    }

    public static func storeUnavailable(_ session: String, _ reason: String) -> BrokerError {
        BrokerError(code: .storeUnavailable, session: session, reason: reason, retryAfter: 5)
    }

    public static func noSuchLogin(_ session: String, id: String) -> BrokerError {
        BrokerError(code: .noSuchLogin, session: session, reason: id, retryAfter: nil)
    }
    public static func login(_ code: Code, _ session: String, _ reason: String) -> BrokerError {
        BrokerError(code: code, session: session, reason: reason, retryAfter: nil)
    }

    public static func resourceNotAllowed(_ session: String, resource: String, _ reason: String) -> BrokerError {
        BrokerError(code: .resourceNotAllowed, session: session, reason: reason, retryAfter: nil, resource: resource)
    }

    public static func scopeNotAllowed(_ session: String, scope: String, _ reason: String) -> BrokerError {
        BrokerError(code: .scopeNotAllowed, session: session, reason: reason, retryAfter: nil, scope: scope)
    }

    public static func targetRefused(_ session: String, key: TokenKey, _ reason: String) -> BrokerError {
        BrokerError(
            code: .targetRefused, session: session, reason: reason, retryAfter: nil, resource: key.resource, scope: key.scope)
    }

    public static func tooManyKeys(_ session: String, limit: Int, retryAfter: Int?, _ reason: String) -> BrokerError {
        var error = BrokerError(code: .tooManyKeys, session: session, reason: reason, retryAfter: retryAfter)
        error.limit = limit
        return error
    }

    /// TooManyKeys: the limit reached.
    public var limit: Int? = nil

    public var description: String { "\(session): \(reason)" }
}
