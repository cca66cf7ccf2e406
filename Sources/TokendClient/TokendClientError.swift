import TokendInterface
import Varlink

/// Why a call to tokend failed, in terms a caller can act on.
public enum TokendClientError: Error, CustomStringConvertible {
    /// No tokend answers at the socket path.
    case unreachable(socket: String, reason: String)
    case loginRequired(session: String, reason: String)
    case upstreamUnavailable(session: String, reason: String, retryAfter: Int?)
    /// A shared session's store cannot be reached (and no valid token is cached).
    case storeUnavailable(session: String, reason: String, retryAfter: Int?)
    case noSuchSession(session: String)
    case permissionDenied
    case invalidParameter(String)
    /// Any other error reply.
    case invalidURL(String)
    case rateLimited(session: String, retryAfter: Int)
    case tooManyConnections(limit: Int)
    case failed(VarlinkError)
    case malformedReply(String)
    /// The login id is unknown: finished, cancelled, expired, or another user's.
    case noSuchLogin(id: String)
    case loginDenied(reason: String)
    case loginExpired(reason: String)
    /// The callback does not answer this login; it stays pending.
    case invalidCallback(reason: String)
    case loginFailed(reason: String)
    /// The session has no endpoint for this login flow (configuration or provider, not an outage).
    case flowUnavailable(session: String, reason: String)
    /// The session does not serve this resource, or not to this user.
    case resourceNotAllowed(session: String, resource: String, reason: String)
    /// The scope asks for more than the session's.
    case scopeNotAllowed(session: String, scope: String, reason: String)
    /// The provider will not issue a token for this resource or scope.
    case targetRefused(session: String, resource: String?, scope: String?, reason: String)
    /// This user holds as many keys (resource, scope) as one person may, or made new ones too fast.
    case tooManyKeys(session: String, limit: Int, retryAfter: Int?, reason: String)
    /// AddSession: the caller already has a session of this name.
    case sessionExists(session: String)
    /// AddSession: this user may not add sessions, or not this one ([user-sessions] in tokend.toml).
    case sessionRefused(session: String, reason: String)
    /// AddSession: the caller holds as many sessions of their own as one person may.
    case tooManySessions(limit: Int)
    /// AddSession: a step of discovery (challenge, resource-metadata, server-metadata, registration,
    /// authorization, token) failed at `url`, with the status it answered (nil: no answer).
    case discoveryFailed(step: String, url: String, status: Int?, reason: String)
    /// AddSession: tokend does not connect to `url` for a user (not https, or an address it keeps from users).
    case addressRefused(url: String, address: String?, reason: String)

    init(_ error: VarlinkError) {
        let p = error.parameters
        switch error.name {
        case BrokerInterface.Error.loginRequired:
            self = .loginRequired(session: p["session"]?.stringValue ?? "", reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.upstreamUnavailable:
            self = .upstreamUnavailable(
                session: p["session"]?.stringValue ?? "", reason: p["reason"]?.stringValue ?? "",
                retryAfter: p["retryAfter"]?.intValue)
        case BrokerInterface.Error.storeUnavailable:
            self = .storeUnavailable(
                session: p["session"]?.stringValue ?? "", reason: p["reason"]?.stringValue ?? "",
                retryAfter: p["retryAfter"]?.intValue)
        case BrokerInterface.Error.noSuchSession:
            self = .noSuchSession(session: p["session"]?.stringValue ?? "")
        case VarlinkError.permissionDenied.name:
            self = .permissionDenied
        case BrokerInterface.Error.rateLimited:
            self = .rateLimited(session: p["session"]?.stringValue ?? "", retryAfter: p["retryAfter"]?.intValue ?? 1)
        case BrokerInterface.Error.tooManyConnections:
            self = .tooManyConnections(limit: p["limit"]?.intValue ?? 0)
        case BrokerInterface.Error.invalidURL:
            self = .invalidURL(p["url"]?.stringValue ?? "")
        case BrokerInterface.Error.noSuchLogin:
            self = .noSuchLogin(id: p["id"]?.stringValue ?? "")
        case BrokerInterface.Error.loginDenied:
            self = .loginDenied(reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.loginExpired:
            self = .loginExpired(reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.invalidCallback:
            self = .invalidCallback(reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.loginFailed:
            self = .loginFailed(reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.flowUnavailable:
            self = .flowUnavailable(session: p["session"]?.stringValue ?? "", reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.resourceNotAllowed:
            self = .resourceNotAllowed(
                session: p["session"]?.stringValue ?? "", resource: p["resource"]?.stringValue ?? "",
                reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.scopeNotAllowed:
            self = .scopeNotAllowed(
                session: p["session"]?.stringValue ?? "", scope: p["scope"]?.stringValue ?? "",
                reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.targetRefused:
            self = .targetRefused(
                session: p["session"]?.stringValue ?? "", resource: p["resource"]?.stringValue,
                scope: p["scope"]?.stringValue, reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.tooManyKeys:
            self = .tooManyKeys(
                session: p["session"]?.stringValue ?? "", limit: p["limit"]?.intValue ?? 0,
                retryAfter: p["retryAfter"]?.intValue, reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.sessionExists:
            self = .sessionExists(session: p["session"]?.stringValue ?? "")
        case BrokerInterface.Error.sessionRefused:
            self = .sessionRefused(session: p["session"]?.stringValue ?? "", reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.tooManySessions:
            self = .tooManySessions(limit: p["limit"]?.intValue ?? 0)
        case BrokerInterface.Error.discoveryFailed:
            self = .discoveryFailed(
                step: p["step"]?.stringValue ?? "", url: p["url"]?.stringValue ?? "", status: p["status"]?.intValue,
                reason: p["reason"]?.stringValue ?? "")
        case BrokerInterface.Error.addressRefused:
            self = .addressRefused(
                url: p["url"]?.stringValue ?? "", address: p["address"]?.stringValue, reason: p["reason"]?.stringValue ?? "")
        case "org.varlink.service.InvalidParameter":
            self = .invalidParameter(p["parameter"]?.stringValue ?? "")
        default:
            self = .failed(error)
        }
    }

    public var description: String {
        switch self {
        case .unreachable(let socket, let reason): "tokend is not reachable at \(socket): \(reason)"
        case .loginRequired(let session, let reason): "session \(session) needs a login: \(reason)"
        case .upstreamUnavailable(let session, let reason, let retryAfter):
            "session \(session) is unavailable for now: \(reason)"
                + (retryAfter.map { "; tokend retries in \($0) s" } ?? "")
        case .storeUnavailable(let session, let reason, _):
            "session \(session): the fleet's shared store is unavailable (\(reason))"
        case .noSuchSession(let session): "no session named \(session) is configured in tokend"
        case .permissionDenied: "tokend refused the call: this user is not allowed to make it"
        case .invalidParameter(let name): "tokend rejected the parameter \(name)"
        case .rateLimited(let session, let retryAfter):
            "session \(session): too many forced refreshes from this user; the next is allowed in \(retryAfter) s"
        case .tooManyConnections(let limit): "tokend is serving its maximum of \(limit) connections"
        case .invalidURL(let url): "\(url) is not an http:// or https:// URL with a host"
        case .failed(let error): "tokend answered \(error)"
        case .malformedReply(let what): "tokend sent a malformed \(what)"
        case .noSuchLogin: "no such login is pending (finished, cancelled, expired, or begun by another user)"
        case .loginDenied(let reason): "the login was refused: \(reason)"
        case .loginExpired(let reason): "the login expired: \(reason)"
        case .invalidCallback(let reason): "the browser's answer was not accepted: \(reason)"
        case .loginFailed(let reason): "the login failed: \(reason)"
        case .flowUnavailable(let session, let reason): "session \(session) cannot log in this way: \(reason)"
        case .resourceNotAllowed(let session, _, let reason): "session \(session): \(reason)"
        case .scopeNotAllowed(let session, let scope, let reason): "session \(session): scope \"\(scope)\": \(reason)"
        case .targetRefused(let session, _, _, let reason): "session \(session): \(reason)"
        case .tooManyKeys(let session, _, _, let reason): "session \(session): \(reason)"
        case .sessionExists(let session): "you already have a session named \(session)"
        case .sessionRefused(let session, let reason): "tokend will not add session \(session): \(reason)"
        case .tooManySessions(let limit): "you hold as many sessions of your own as one person may (\(limit))"
        case .discoveryFailed(let step, let url, let status, let reason):
            "discovery failed at its \(step) step: \(url) "
                + (status.map { "answered HTTP \($0)" } ?? "gave no answer") + (reason.isEmpty ? "" : " (\(reason))")
        case .addressRefused(let url, let address, let reason):
            "tokend does not connect to \(url) for a user" + (address.map { " (address \($0))" } ?? "") + ": \(reason)"
        }
    }
}
