import Foundation
import Logging
import Synchronization
import TokendClient

/// What a request gets from tokend: the Authorization and Cookie header values.
struct RequestCredentials: Sendable {
    let token: AccessToken
    let authorization: String
    let cookies: String

    /// Nil when a value could not be a header's (a CR or LF in it would add headers of its own).
    init?(token: AccessToken, cookies: String) {
        let authorization = token.authorizationHeaderValue
        guard Headers.isFieldValue(authorization), Headers.isFieldValue(cookies) else { return nil }
        self.token = token
        self.authorization = authorization
        self.cookies = cookies
    }
}

extension RequestCredentials {
    /// Values checked when tokend gave them.
    init(checked token: AccessToken, authorization: String, cookies: String) {
        self.token = token
        self.authorization = authorization
        self.cookies = cookies
    }
}

/// tokend gave a token or cookies no header can carry.
struct UnusableCredentials: Error, CustomStringConvertible {
    var description: String { "the token or the cookies tokend gave contain characters no HTTP header may carry" }
}

/// The session's token and cookies as tokend last gave them, kept current by
/// tokend's event stream (Subscribe): a request whose answers are cached costs
/// no call to tokend. A cached token serves while no event has told of a newer
/// generation (a refresh anywhere, a logout, loginRequired), and while it keeps
/// more than half the life it had when tokend gave it and more than 30 s; a
/// cached Cookie header serves while the jar's version is the one it was read
/// at and none of its cookies has expired. Nothing is cached while the stream
/// is down: each request then asks tokend, as it would without a cache.
///
/// Every call to tokend for a token is made here, in `fetch` and `refresh`.
final class Credentials: Sendable {
    private struct Cached {
        var token: AccessToken
        var authorization: String
        var until: Double
    }
    private struct CookieHeader {
        var header: String
        var version: Int
        var until: Double
    }
    private struct State {
        /// The stream's status event has come and the stream has not ended since.
        var live = false
        /// The key whose refreshed events concern this proxy's token, as the status event named it.
        var key: [String?] = [nil, nil]
        var generation = 0
        var version = 0
        var token: Cached?
        var cookies: [String: CookieHeader] = [:]
    }

    /// Paths whose Cookie header is remembered at once; past it the map starts again.
    static let cookiePaths = 1024

    let session: String?
    /// The resource (RFC 8707) and scope the token is for (nil: the session's own token).
    let resource: String?
    let scope: String?
    let socket: String?
    let logger: Logger
    private let state = Mutex(State())
    private let tokend = Mutex<TokendClient?>(nil)
    /// --pass-cookies: the upstream's Set-Cookie goes to the client and not to tokend.
    let passCookies: Bool
    /// tokend refused ImportCookies (the user may not write cookies): Set-Cookie passes through from then on.
    private let importRefused = Atomic(false)

    init(session: String?, resource: String? = nil, scope: String? = nil, socket: String?, passCookies: Bool = false, logger: Logger) {
        self.session = session
        self.resource = resource
        self.scope = scope
        self.socket = socket
        self.passCookies = passCookies
        self.logger = logger
    }

    /// Where an answer's Set-Cookie goes.
    enum CookieRule {
        /// To tokend's jar, and not to the client.
        case toJar
        /// To the client, as it came (--pass-cookies, or tokend refused this user's cookies).
        case passThrough
    }

    var cookieRule: CookieRule { passCookies || importRefused.load(ordering: .relaxed) ? .passThrough : .toJar }

    /// The cached answers for a request to `path` (its path without the query), if both are current.
    func cached(path: Substring) -> RequestCredentials? {
        let now = Date().timeIntervalSince1970
        return state.withLock { state in
            guard state.live, let token = state.token, token.until > now, token.token.generation >= state.generation,
                let cookies = state.cookies[String(path)], cookies.version == state.version, cookies.until > now
            else { return nil }
            return RequestCredentials(checked: token.token, authorization: token.authorization, cookies: cookies.header)
        }
    }

    /// tokend's token (GetToken) and the Cookie header for `url` (GetCookies), remembered for `path`.
    func fetch(url: String, path: Substring) async throws -> RequestCredentials {
        let asked = Date().timeIntervalSince1970
        let (token, cookies) = try await withTokend { client in
            let token = try await client.token(session: self.session, resource: self.resource, scope: self.scope)
            return (token, try await client.cookies(session: self.session, url: url))
        }
        guard let answer = RequestCredentials(token: token, cookies: cookies.header) else { throw UnusableCredentials() }
        remember(token, authorization: answer.authorization, at: asked)
        let until = cookies.cookies.compactMap(\.expiresAt).min().map(Double.init) ?? .infinity
        state.withLock { state in
            guard state.live, cookies.version >= state.version else { return }
            state.version = cookies.version
            if state.cookies.count >= Self.cookiePaths { state.cookies.removeAll(keepingCapacity: true) }
            state.cookies[String(path)] = CookieHeader(header: cookies.header, version: cookies.version, until: until)
        }
        return answer
    }

    /// Compare-and-refresh after a 401 to `stale`: the newer token, or nil when tokend has none to give.
    func refresh(after stale: AccessToken) async -> AccessToken? {
        let asked = Date().timeIntervalSince1970
        guard
            let fresh = try? await withTokend({ client in
                try await client.refresh(
                    session: self.session, staleGeneration: stale.generation, resource: self.resource, scope: self.scope)
            }), fresh.accessToken != stale.accessToken, Headers.isFieldValue(fresh.authorizationHeaderValue)
        else { return nil }
        remember(fresh, authorization: fresh.authorizationHeaderValue, at: asked)
        return fresh
    }

    /// The upstream's Set-Cookie headers into tokend's jar; the cached Cookie headers are stale from then on.
    /// Whether tokend's jar took them: when it did not, the client gets them. A refusal (the user may not
    /// write cookies: ImportCookies needs cookies-write) is logged once, and no later answer waits for it.
    @discardableResult
    func importCookies(_ setCookie: [String], from url: String) async -> Bool {
        do {
            let (version, _, _) = try await withTokend { client in
                try await client.importCookies(session: self.session, url: url, setCookie: setCookie)
            }
            state.withLock { state in
                state.version = max(state.version, version)
                state.cookies.removeAll(keepingCapacity: true)
            }
            return true
        } catch TokendClientError.permissionDenied {
            if !importRefused.exchange(true, ordering: .relaxed) {
                logger.warning(
                    "tokend refuses this user's cookies (ImportCookies needs cookies-write): the upstream's Set-Cookie goes to the client from now on")
            }
            return false
        } catch {
            logger.warning("cookies not passed to tokend; the client gets them", metadata: ["problem": "\(error)"])
            return false
        }
    }

    private func remember(_ token: AccessToken, authorization: String, at asked: Double) {
        let expires = Double(token.expiresAt)
        let until = min(asked + (expires - asked) / 2, expires - 30)
        state.withLock { state in
            guard state.live, token.generation >= state.generation else { return }
            if let cached = state.token, cached.token.generation > token.generation { return }
            state.token = Cached(token: token, authorization: authorization, until: until)
        }
    }

    /// Follows the session's events until the task is cancelled, again a second after the stream ends.
    func follow() async {
        while !Task.isCancelled {
            do {
                let client = try await connectedTokend()
                for try await event in client.events(session: session, resource: resource, scope: scope) {
                    apply(event)
                }
            } catch {
                logger.debug("tokend's event stream ended", metadata: ["reason": "\(error)"])
            }
            state.withLock { state in
                state.live = false
                state.token = nil
                state.cookies.removeAll()
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func apply(_ event: SessionEvent) {
        state.withLock { state in
            switch event.event {
            case "status":  // the stream's first event: where this tokend's counts stand now
                state.live = true
                state.key = [event.resource, event.scope]
                state.generation = event.generation
                state.version = event.version ?? 0
                state.token = nil
                state.cookies.removeAll(keepingCapacity: true)
            case "cookies":
                state.version = max(state.version, event.version ?? state.version)
                state.cookies.removeAll(keepingCapacity: true)
            case "refreshed" where [event.resource, event.scope] != state.key:
                break  // another key's token (tokend names the key of every refresh)
            default:  // refreshed, loginRequired, loggedOut, loggedIn, loginPending
                state.generation = max(state.generation, event.generation)
                state.token = nil
            }
        }
    }

    /// tokend, connected once and again after it restarts (one retry on a new connection).
    func withTokend<T: Sendable>(_ body: (TokendClient) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            let client = try await connectedTokend()
            do {
                return try await body(client)
            } catch let error as TokendClientError {
                guard case .unreachable(_, let reason) = error, attempt == 1 else { throw error }
                tokend.withLock { if $0 === client { $0 = nil } }
                logger.info("reconnecting to tokend", metadata: ["reason": "\(reason)"])
                await client.close()
            }
        }
    }

    private func connectedTokend() async throws -> TokendClient {
        if let existing = tokend.withLock({ $0 }) { return existing }
        let client = try await TokendClient.connect(socket: socket)
        let kept = tokend.withLock { current in
            if let current { return current }
            current = client
            return client
        }
        if kept !== client { await client.close() }  // another task connected first
        return kept
    }
}
