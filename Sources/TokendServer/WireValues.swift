import Broker
import CookieJar
import TokendInterface
import Varlink

extension Token {
    var json: JSONValue {
        [
            "accessToken": .string(accessToken.reveal()), "tokenType": .string(tokenType),
            "expiresAt": .int(expiresAt), "generation": .int(generation), "scope": .optional(scope),
        ]
    }
}

extension SessionStatus {
    var json: JSONValue {
        [
            "session": .string(session), "state": .string(state), "generation": .int(generation),
            "expiresAt": .optional(expiresAt), "expirySource": .optional(expirySource),
            "lastRefreshAt": .optional(lastRefreshAt), "nextRefreshAt": .optional(nextRefreshAt),
            "refreshes": .int(refreshes), "coalesced": .int(coalesced), "failures": .int(failures),
            "lastError": .optional(lastError), "cookies": .int(cookieCount), "cookieVersion": .int(cookieVersion),
            "subject": .optional(subject), "username": .optional(username), "email": .optional(email),
            "pendingLogins": .int(pendingLogins), "webOrigins": .array(webOrigins.map(JSONValue.string)),
            "gitHosts": .array(gitHosts.map(JSONValue.string)), "gitUsername": .optional(gitUsername),
            "hostId": .optional(hostID), "store": .optional(store), "sharedVersion": .optional(sharedVersion),
        ]
    }
}

extension LoginTicket {
    var json: JSONValue {
        [
            "id": .string(id), "session": .string(session), "flow": .string(flow.rawValue), "expiresAt": .int(expiresAt),
            "userCode": .optional(userCode), "verificationUri": .optional(verificationURI),
            "verificationUriComplete": .optional(verificationURIComplete), "interval": .optional(interval),
            "authorizationUrl": .optional(authorizationURL),
        ]
    }
}

extension SessionEvent {
    var parameters: JSONObject {
        var parameters: JSONObject = [
            "event": .string(kind.rawValue), "session": .string(session), "generation": .int(generation),
            "expiresAt": .optional(expiresAt), "reason": .optional(reason), "version": .int(cookieVersion),
        ]
        if kind == .cookies {
            parameters["changes"] = .array(
                changes.map { ["action": .string($0.action.rawValue), "cookie": $0.cookie.json] })
            if snapshot { parameters["snapshot"] = true }
        }
        if let loginFlow { parameters["login"] = .string(loginFlow) }
        return parameters
    }
}

extension Cookie {
    var json: JSONValue {
        [
            "name": .string(name), "value": .string(value), "domain": .string(domain), "hostOnly": .bool(hostOnly),
            "path": .string(path), "expiresAt": .optional(expiresAt), "secure": .bool(secure),
            "httpOnly": .bool(httpOnly), "sameSite": .optional(sameSite?.rawValue),
        ]
    }
}

extension BrokerError: VarlinkErrorConvertible {
    /// One Varlink error per code; its parameters are session and reason,
    /// plus retryAfter for the "try again" errors (NoSuchLogin carries the id).
    public var varlinkError: VarlinkError {
        let about: JSONObject = ["session": .string(session), "reason": .string(reason)]
        let retry: JSONObject = about.merging(["retryAfter": .optional(retryAfter)]) { a, _ in a }
        return switch code {
        case .noSuchSession: VarlinkError(BrokerInterface.Error.noSuchSession, ["session": .string(session)])
        case .noSuchLogin: VarlinkError(BrokerInterface.Error.noSuchLogin, ["id": .string(reason)])
        case .loginRequired: VarlinkError(BrokerInterface.Error.loginRequired, about)
        case .loginDenied: VarlinkError(BrokerInterface.Error.loginDenied, about)
        case .loginExpired: VarlinkError(BrokerInterface.Error.loginExpired, about)
        case .invalidCallback: VarlinkError(BrokerInterface.Error.invalidCallback, about)
        case .loginFailed: VarlinkError(BrokerInterface.Error.loginFailed, about)
        case .upstreamUnavailable: VarlinkError(BrokerInterface.Error.upstreamUnavailable, retry)
        case .storeUnavailable: VarlinkError(BrokerInterface.Error.storeUnavailable, retry)
        }
    }
}
