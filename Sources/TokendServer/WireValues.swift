import Broker
import CookieJar
import TokendInterface
import Synchronization
import Varlink

/// The broker's values as the interface's types (BrokerInterface+Types).
extension Token {
    var wire: BrokerInterface.Token {
        BrokerInterface.Token(
            accessToken: accessToken.reveal(), tokenType: tokenType, expiresAt: expiresAt, generation: generation,
            scope: scope, resource: resource)
    }
}

/// GetToken's and Refresh's reply parameters, made once per token: after a
/// refresh every waiter (ten thousand in a stampede) gets the same token.
final class TokenReplies: Sendable {
    private let made = Mutex<[String: JSONObject]>([:])

    func parameters(for token: Token) throws -> JSONObject {
        // One token may answer several resources (shared-audience): each reply names its own.
        let key = (token.resource ?? "") + "\u{0}" + token.accessToken.reveal()
        if let known = made.withLock({ $0[key] }) { return known }
        let parameters = try BrokerInterface.GetToken.Out(token: token.wire).parameters()
        made.withLock { made in
            // Old tokens: the current ones of a few sessions and their keys are kept.
            if made.count >= 128 { made.removeAll() }
            made[key] = parameters
        }
        return parameters
    }
}

extension SessionStatus {
    var wire: BrokerInterface.SessionStatus {
        var status = BrokerInterface.SessionStatus(
            session: session, state: state, generation: generation, refreshes: refreshes, coalesced: coalesced,
            failures: failures, cookies: cookieCount, cookieVersion: cookieVersion, pendingLogins: pendingLogins,
            webOrigins: webOrigins, gitHosts: gitHosts)
        status.expiresAt = expiresAt
        status.expirySource = expirySource
        status.lastRefreshAt = lastRefreshAt
        status.nextRefreshAt = nextRefreshAt
        status.lastError = lastError
        status.subject = subject
        status.username = username
        status.email = email
        status.gitUsername = gitUsername
        status.redirectUri = redirectURI
        status.hostId = hostID
        status.store = store
        status.sharedVersion = sharedVersion
        status.fleet = fleet.map { fleet in
            BrokerInterface.FleetStatus(
                following: fleet.following, pollInterval: fleet.pollInterval, copyAge: fleet.copyAge,
                statements: fleet.statements, connects: fleet.connects, lastRoundTrip: fleet.lastRoundTrip,
                lease: fleet.lease.map {
                    BrokerInterface.FleetLease(holder: $0.holder, epoch: $0.epoch, remaining: $0.remaining, heldHere: $0.heldHere)
                }, clockOffset: fleet.clockOffset,
                check: fleet.check.map { check in
                    BrokerInterface.StoreCheck(
                        user: check.user,
                        missing: check.missing.sorted { $0.key < $1.key }.map {
                            BrokerInterface.MissingGrant(table: $0.key, privileges: $0.value)
                        }, pooler: check.pooler, age: check.age)
                })
        }
        status.resources = resources
        status.stateSince = stateSince
        status.webResources = webResources
        status.strategy = strategy
        status.strategyReason = strategyReason
        status.dpop = dpop.map {
            BrokerInterface.DPoPStatus(thumbprint: $0.thumbprint, keyStorage: $0.keyStorage, binding: $0.binding, problem: $0.problem)
        }
        status.pageTokens = pageTokens
        status.pageTokensReason = pageTokensReason
        status.loginFlows = loginFlows
        // A session a user added is USER/NAME; no name in tokend.toml has a '/'.
        if let slash = session.firstIndex(of: "/") { status.owner = String(session[..<slash]) }
        status.tokens = tokens.map {
            BrokerInterface.KeyedToken(
                resource: $0.resource, scope: $0.scope, generation: $0.generation, expiresAt: $0.expiresAt,
                lastError: $0.lastError)
        }
        return status
    }
}

extension LoginTicket {
    var wire: BrokerInterface.PendingLogin {
        var login = BrokerInterface.PendingLogin(id: id, session: session, flow: flow.rawValue, expiresAt: expiresAt)
        login.userCode = userCode
        login.verificationUri = verificationURI
        login.verificationUriComplete = verificationURIComplete
        login.interval = interval
        login.authorizationUrl = authorizationURL
        return login
    }
}

extension SessionEvent {
    var wire: BrokerInterface.Event {
        var event = BrokerInterface.Event(event: kind.rawValue, session: session, generation: generation)
        event.expiresAt = expiresAt
        event.reason = reason
        event.version = cookieVersion
        if kind == .cookies {
            event.changes = changes.map { BrokerInterface.CookieChange(action: $0.action.rawValue, cookie: $0.cookie.wire) }
            if snapshot { event.snapshot = true }
        }
        event.login = loginFlow
        event.resource = resource
        event.scope = scope
        return event
    }
}

extension Cookie {
    var wire: BrokerInterface.Cookie {
        BrokerInterface.Cookie(
            name: name, value: value, domain: domain, hostOnly: hostOnly, path: path, expiresAt: expiresAt,
            secure: secure, httpOnly: httpOnly, sameSite: sameSite?.rawValue)
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
        case .flowUnavailable: VarlinkError(BrokerInterface.Error.flowUnavailable, about)
        case .upstreamUnavailable: VarlinkError(BrokerInterface.Error.upstreamUnavailable, retry)
        case .storeUnavailable: VarlinkError(BrokerInterface.Error.storeUnavailable, retry)
        case .resourceNotAllowed:
            VarlinkError(BrokerInterface.Error.resourceNotAllowed, about.merging(["resource": .string(resource ?? "")]) { a, _ in a })
        case .scopeNotAllowed:
            VarlinkError(BrokerInterface.Error.scopeNotAllowed, about.merging(["scope": .string(scope ?? "")]) { a, _ in a })
        case .targetRefused:
            VarlinkError(
                BrokerInterface.Error.targetRefused,
                about.merging(["resource": .optional(resource), "scope": .optional(scope)]) { a, _ in a })
        case .tooManyKeys:
            VarlinkError(BrokerInterface.Error.tooManyKeys, retry.merging(["limit": .int(limit ?? 0)]) { a, _ in a })
        }
    }
}

extension SessionStatus {
    /// The status as a subscriber of `key` starts from: that key's generation and expiry.
    func describing(_ key: TokenKey) -> SessionStatus {
        guard !key.isSession else { return self }
        var status = self
        let held = tokens.first { $0.resource == key.resource && $0.scope == key.scope }
        status.generation = held?.generation ?? 0
        status.expiresAt = held?.expiresAt
        return status
    }
}
