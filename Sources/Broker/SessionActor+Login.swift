#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CookieJar
import DPoP
import Loopback
import OAuth
import Secrets
import StateStore

/// A login begun and not yet finished. Its secrets (the device code, the PKCE
/// verifier) stay in this actor's memory only.
struct PendingLogin {
    enum Grant {
        case device(DeviceAuthorization)
        case browser(AuthorizationCodeLogin, authorizationURL: URL)
    }
    let ticket: LoginTicket
    let grant: Grant
    /// Who began it: only that user (or root) may finish or cancel it.
    let owner: UInt32?
    /// Seconds between polls; grows by 5 with every slow_down (RFC 8628 §3.5).
    var interval: Int
    /// Set while a FinishLogin is polling for it.
    var polling = false
    /// The DPoP key this login's grant is bound to (dpop = true).
    var proofKey: (any ProofKey)? = nil
}

/// How the user approves a login.
public enum LoginFlow: String, Sendable {
    /// Device authorization grant (RFC 8628): a code entered on another device.
    case device
    /// Authorization code with PKCE in a browser, back to a loopback listener.
    case browser
}

/// What BeginLogin hands back: enough for the user's part, no secret.
public struct LoginTicket: Sendable, Equatable {
    public var id: String
    public var session: String
    public var flow: LoginFlow
    public var expiresAt: Int
    public var userCode: String?
    public var verificationURI: String?
    public var verificationURIComplete: String?
    public var interval: Int?
    public var authorizationURL: String?
}

extension SessionActor {
    static let maximumPendingLogins = 8
    /// How long a browser login may take from BeginLogin to the callback.
    static let browserLoginLifetime = 600.0
    /// The most a device login may last, and the longest wait between its polls,
    /// whatever the provider says (its numbers are added to the clock).
    static let longestDeviceLogin = 3600
    static let longestPollInterval = 60

    /// Begins a device or browser login and returns what the user needs.
    public func beginLogin(flow: LoginFlow, redirectURI: String?, owner: UInt32?) async throws -> LoginTicket {
        guard !stopping else { throw BrokerError.upstreamUnavailable(name, "tokend is shutting down", retryAfter: 1) }
        dropExpiredLogins()
        guard pendingLogins.count < Self.maximumPendingLogins else {
            throw BrokerError.login(
                .loginFailed, name, "\(Self.maximumPendingLogins) logins are already pending for this session; finish or cancel one")
        }
        if endpoint.issuer != nil, providerMetadata == nil { await discoverOnce() }
        // The grant is bound to this key from its first request on (a pushed authorization request included).
        let proofKey = try await makeLoginKey()
        let id = "\(name)/\(randomToken())"
        let now = clock.now()
        let login: PendingLogin
        switch flow {
        case .device:
            let device: DeviceAuthorization
            do {
                device = try await endpoint.deviceAuthorization()
            } catch {
                throw loginError(error, doing: "device authorization")
            }
            // The provider's numbers, held to what a device login can use (RFC 8628 suggests minutes).
            let lifetime = min(max(device.expiresIn, 1), Self.longestDeviceLogin)
            let interval = min(max(device.interval, 1), Self.longestPollInterval)
            let ticket = LoginTicket(
                id: id, session: name, flow: flow, expiresAt: SessionRecord.clampedTime(Int(now)) + lifetime,
                userCode: device.userCode, verificationURI: device.verificationURI,
                verificationURIComplete: device.verificationURIComplete, interval: interval)
            login = PendingLogin(ticket: ticket, grant: .device(device), owner: owner, interval: interval)
        case .browser:
            guard let redirectURI, LoopbackRedirect(redirectURI) != nil else {
                throw BrokerError.login(
                    .invalidCallback, name,
                    "a browser login needs redirectUri http://127.0.0.1:PORT/PATH (or [::1]) where the caller listens")
            }
            // A session with redirect-uri takes browser logins only there; the command that listens there names the session.
            if let only = self.redirectURI, redirectURI != only {
                throw BrokerError.login(
                    .invalidCallback, name,
                    "this session's provider takes only the redirect URI \(only) (redirect-uri): `\(Self.loginCommand(name)) --browser` listens there")
            }
            let code = AuthorizationCodeLogin(redirectURI: redirectURI)
            let url: URL
            do {
                url = try await endpoint.beginAuthorization(for: code, proofKey: proofKey)
            } catch {
                throw loginError(error, doing: "the authorization request")
            }
            let ticket = LoginTicket(
                id: id, session: name, flow: flow, expiresAt: Int(now + Self.browserLoginLifetime),
                authorizationURL: url.absoluteString)
            login = PendingLogin(ticket: ticket, grant: .browser(code, authorizationURL: url), owner: owner, interval: 0)
        }
        var begun = login
        begun.proofKey = proofKey
        pendingLogins[id] = begun
        var pending = event(.loginPending)
        pending.loginFlow = flow.rawValue
        await publish([pending], waitForDelivery: false)
        return login.ticket
    }

    /// Ends a pending login: polls the token endpoint until the user approves
    /// (device), or checks the browser's callback and redeems its code.
    public func finishLogin(id: String, callbackURL: String?, caller: UInt32?) async throws -> SessionStatus {
        dropExpiredLogins()
        guard let login = pendingLogins[id], Self.may(caller, act: login), !login.polling else {
            throw BrokerError.noSuchLogin(name, id: id)
        }
        switch login.grant {
        case .browser(let code, _):
            guard let callbackURL else {
                throw BrokerError.login(.invalidCallback, name, "a browser login is finished with the callback URL")
            }
            let authorizationCode: Secret
            do {
                authorizationCode = try code.code(
                    fromCallback: callbackURL, issuer: endpoint.issuer, issRequired: issParameterPromised)
            } catch .invalid(let reason) {
                logger.warning("login callback refused", metadata: ["reason": "\(reason)"])
                throw BrokerError.login(.invalidCallback, name, reason)
            } catch .denied(_, let reason) {
                pendingLogins[id] = nil
                throw BrokerError.login(.loginDenied, name, reason)
            }
            // The state is spent: a replayed callback finds no login.
            pendingLogins[id] = nil
            let answer = await endpoint.redeem(
                .authorizationCode(authorizationCode, code), cookieHeader: cookieHeaderForEndpoint(), proofKey: login.proofKey)
            return try await completeLogin(answer, nonce: code.nonce, flow: .browser, proofKey: login.proofKey)
        case .device(let device):
            pendingLogins[id]?.polling = true
            defer { pendingLogins[id]?.polling = false }
            return try await pollDeviceLogin(id: id, device: device)
        }
    }

    /// Stops a pending login (tokenctl on Ctrl-C); a FinishLogin polling for it ends with NoSuchLogin.
    public func cancelLogin(id: String, caller: UInt32?) throws {
        guard let login = pendingLogins[id], Self.may(caller, act: login) else { throw BrokerError.noSuchLogin(name, id: id) }
        pendingLogins[id] = nil
        logger.notice("login cancelled", metadata: ["flow": "\(login.ticket.flow.rawValue)"])
    }

    func pollDeviceLogin(id: String, device: DeviceAuthorization) async throws -> SessionStatus {
        while true {
            guard let login = pendingLogins[id] else { throw BrokerError.noSuchLogin(name, id: id) }
            let expiresAt = Double(login.ticket.expiresAt)
            let next = clock.now() + Double(login.interval)
            guard next < expiresAt else {
                pendingLogins[id] = nil
                throw BrokerError.login(.loginExpired, name, "the device code expired before the user approved it")
            }
            // A caller that went away ends the poll (the login stays pending for its next FinishLogin);
            // a cancelled sleep that returned at once would ask the provider in a tight loop.
            try await clock.sleep(until: next)
            guard pendingLogins[id] != nil else { throw BrokerError.noSuchLogin(name, id: id) }
            let answer = await endpoint.redeem(
                .deviceCode(device.deviceCode), cookieHeader: cookieHeaderForEndpoint(), proofKey: login.proofKey)
            guard case .failure(let error) = answer.result else {
                pendingLogins[id] = nil
                return try await completeLogin(answer, nonce: nil, flow: .device, proofKey: login.proofKey)
            }
            switch error.code {
            case "authorization_pending":
                continue
            case "slow_down":
                pendingLogins[id]?.interval = min(login.interval + 5, Self.longestPollInterval)
                logger.info("device login: server asked to slow down", metadata: ["interval": "\(login.interval + 5)"])
            case "access_denied":
                pendingLogins[id] = nil
                throw BrokerError.login(.loginDenied, name, "the user refused the device login")
            case "expired_token":
                pendingLogins[id] = nil
                throw BrokerError.login(.loginExpired, name, "the device code expired before the user approved it")
            default:
                if error.kind != .transient {
                    pendingLogins[id] = nil
                    throw loginError(error, doing: "the device code")
                }
                // Unreachable or a passing server error: keep polling until the code expires.
                logger.warning("device login poll failed", metadata: ["reason": "\(error.reason)"])
            }
        }
    }

    /// A redeemed login grant becomes the session: checked (identity), on
    /// disk, in memory, then announced (`loggedIn`).
    func completeLogin(
        _ answer: RefreshAnswer, nonce: String?, flow: LoginFlow, proofKey: (any ProofKey)? = nil
    ) async throws -> SessionStatus {
        let cookieChanges = receiveEndpointCookies(answer.setCookie)
        let response: TokenResponse
        switch answer.result {
        case .success(let success):
            response = success
        case .failure(let error):
            throw loginError(error, doing: "the login")
        }
        guard let refreshToken = response.refreshToken else {
            throw BrokerError.login(
                .loginFailed, name,
                "the server issued no refresh token, which tokend needs to keep the session (does scope need offline_access?)")
        }
        var identity: Identity?
        do {
            identity = try await endpoint.identity(of: response, nonce: nonce)
        } catch where error.refusesLogin {
            logger.error("login refused: ID token invalid", metadata: ["problem": "\(error.description)"])
            throw BrokerError.login(.loginFailed, name, error.description)
        } catch {
            logger.warning("identity unknown", metadata: ["problem": "\(error.description)"])
        }
        let audience = await confirmedAudience(of: response.accessToken)
        await settle()
        try await withRefreshTurn { try await fleetExclusive("login") {
            var next = SessionRecord(
                phase: .active, refreshToken: refreshToken, generation: record.generation, subject: identity?.subject,
                username: identity?.username, email: identity?.email
            )
            next.grantResources = keyPolicy.resources
            next = applying(response, to: next, issuedAt: Int(clock.now()))
            bind(proofKey, into: &next)
            next.audience = audience
            learnFromFirstToken(audience, into: &next)
            await persist(next, what: "login")
            record = next
        } }
        backoff.reset()
        lastError = record.lifetimeNote
        reschedule()
        logger.notice("logged in", metadata: ["flow": "\(flow.rawValue)", "subject": "\(identity?.subject ?? "unknown")"])
        var events = cookieChanges.isEmpty ? [] : [event(.cookies, changes: cookieChanges)]
        events.append(event(.loggedIn))
        await publish(events, waitForDelivery: true)
        return status()
    }

    /// A provider's refusal during a login (a PAR refusal, an unregistered or
    /// mismatched redirect URI, a refused client or code) fails the login with
    /// the provider's words, already redacted by the endpoint; only what may
    /// pass (network, 5xx, 429) is UpstreamUnavailable.
    func loginError(_ error: TokenEndpointError, doing what: String) -> BrokerError {
        if error.code == TokenEndpointError.missingEndpoint {
            return BrokerError.login(.flowUnavailable, name, error.reason)
        }
        guard error.kind != .transient else {
            return BrokerError.upstreamUnavailable(name, error.reason, retryAfter: error.retryAfter)
        }
        return BrokerError.login(.loginFailed, name, "the provider refused \(what): \(error.reason)")
    }

    func dropExpiredLogins() {
        let now = Int(clock.now())
        for (id, login) in pendingLogins where login.ticket.expiresAt <= now && !login.polling {
            pendingLogins[id] = nil
        }
    }

    static func may(_ caller: UInt32?, act login: PendingLogin) -> Bool {
        login.owner == nil || caller == 0 || caller == login.owner
    }

    /// Discovery only accepts a document naming the configured issuer, so the
    /// issuer to compare `iss` with is the configured one.
    var issParameterPromised: Bool {
        providerMetadata.flatMap(ProviderMetadata.decode)?.issParameterSupported ?? false
    }
}
