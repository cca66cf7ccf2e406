import Deadline
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Synchronization
import TokendClient

/// What a request gets from tokend: the Authorization and Cookie header values, and for a DPoP-bound
/// token the proof of that very request.
struct RequestCredentials: Sendable {
    let token: AccessToken
    let authorization: String
    let cookies: String
    /// The token is DPoP-bound (RFC 9449): it goes with a proof of each request.
    let bound: Bool
    /// The proof this request carries (nil for a Bearer token).
    let proof: RequestProof?

    /// Nil when a value could not be a header's (a CR or LF in it would add headers of its own).
    init?(token: AccessToken, cookies: String, proof: RequestProof? = nil) {
        let (authorization, bound) = Self.authorization(token)
        guard Headers.isFieldValue(authorization), Headers.isFieldValue(cookies), proof.map({ Headers.isFieldValue($0.jwt) }) ?? true
        else { return nil }
        self.token = token
        self.authorization = authorization
        self.cookies = cookies
        self.bound = bound
        self.proof = bound ? proof : nil
    }
}

extension RequestCredentials {
    /// The Authorization value of `token` (`DPoP <token>` for a DPoP-bound one, whatever the case tokend
    /// gave its type in), and whether it is bound.
    static func authorization(_ token: AccessToken) -> (String, bound: Bool) {
        token.isDPoPBound ? ("DPoP \(token.accessToken)", true) : (token.authorizationHeaderValue, false)
    }

    /// Values checked when tokend gave them.
    init(checked token: AccessToken, authorization: String, cookies: String, bound: Bool = false) {
        self.token = token
        self.authorization = authorization
        self.cookies = cookies
        self.bound = bound
        proof = nil
    }
}

/// A DPoP proof of one request, as tokend made it (GetProof).
struct RequestProof: Sendable {
    let jwt: String
    /// The upstream's nonce it carries.
    let nonce: String?
    /// It was made after the upstream asked for a nonce (use_dpop_nonce): the request is not sent again for another.
    let nonceRetry: Bool
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
/// Every call to tokend for a token is made here, in `fetch`, `refresh` and `prove` (a DPoP proof per
/// request, Credentials+Proof.swift).
final class Credentials: Sendable {
    private struct Cached {
        var token: AccessToken
        var authorization: String
        var bound: Bool
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
    /// How long tokend may take to answer one request's call (connecting included): --timeout.
    let tokendTimeout: Duration
    private let state = Mutex(State())
    private let tokend = Mutex<TokendClient?>(nil)
    /// DPoP: whether the tokens are bound, the upstream's nonce, the refusals logged.
    let proofs = ProofState()
    /// --pass-cookies: the upstream's Set-Cookie goes to the client and not to tokend.
    let passCookies: Bool
    /// tokend refused ImportCookies (the user may not write cookies): Set-Cookie passes through from then on.
    private let importRefused = Atomic(false)
    /// Whether a cookie tokend's jar rejected has been logged (once: a session that accepts none would log
    /// every answer).
    private let rejectionLogged = Atomic(false)

    init(
        session: String?, resource: String? = nil, scope: String? = nil, socket: String?, passCookies: Bool = false,
        tokendTimeout: Duration = .seconds(60), logger: Logger
    ) {
        self.tokendTimeout = tokendTimeout
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
            return RequestCredentials(checked: token.token, authorization: token.authorization, cookies: cookies.header, bound: token.bound)
        }
    }

    /// tokend's token (GetToken) and the Cookie header for `url` (GetCookies), remembered for `path`. A
    /// DPoP-bound token comes with a proof of `target` (GetProof, which gives the token too: once the
    /// tokens are known to be bound, it takes GetToken's place).
    func fetch(url: String, path: Substring, target: ProofTarget) async throws -> RequestCredentials {
        let asked = Date().timeIntervalSince1970
        if proofs.bound {
            do {
                let cookies = try await withTokend { client in try await client.cookies(session: self.session, url: url) }
                let answer = try await prove(target, cookies: cookies.header)
                remember(cookies, for: path)
                return answer
            } catch let refused as ProofRefused where refused.notDPoP {
                proofs.bound = false  // the session's tokens are no longer bound: GetToken again
            }
        }
        let (token, cookies) = try await withTokend { client in
            let token = try await client.token(session: self.session, resource: self.resource, scope: self.scope)
            return (token, try await client.cookies(session: self.session, url: url))
        }
        guard var answer = RequestCredentials(token: token, cookies: cookies.header) else { throw UnusableCredentials() }
        remember(token, at: asked)
        remember(cookies, for: path)
        if answer.bound {
            proofs.bound = true
            answer = try await prove(target, cookies: cookies.header)
        }
        return answer
    }

    /// The Cookie header tokend gave for `path`, while the jar stays at its version and its cookies live.
    private func remember(_ cookies: CookieSet, for path: Substring) {
        let until = cookies.cookies.compactMap(\.expiresAt).min().map(Double.init) ?? .infinity
        state.withLock { state in
            guard state.live, cookies.version >= state.version else { return }
            state.version = cookies.version
            if state.cookies.count >= Self.cookiePaths { state.cookies.removeAll(keepingCapacity: true) }
            state.cookies[String(path)] = CookieHeader(header: cookies.header, version: cookies.version, until: until)
        }
    }

    /// What a compare-and-refresh after a 401 came to.
    enum Refreshed: Sendable {
        /// A newer token: the request goes again with it.
        case fresh(AccessToken)
        /// tokend has no newer token to give (the call failed, or it gave the refused one again).
        case none
        /// The session needs a login (tokend refused the refresh token, or has none): the person logs in.
        case loginRequired(TokendClientError)
    }

    /// Compare-and-refresh after a 401 to `stale`: one refresh for every request that met the 401 with
    /// that token's generation (tokend refreshes once and gives the others its result).
    func refresh(after stale: AccessToken) async -> Refreshed {
        let asked = Date().timeIntervalSince1970
        let fresh: AccessToken
        do {
            fresh = try await withTokend { client in
                try await client.refresh(
                    session: self.session, staleGeneration: stale.generation, resource: self.resource, scope: self.scope)
            }
        } catch let error as TokendClientError {
            if case .loginRequired = error { return .loginRequired(error) }
            return .none
        } catch {
            return .none
        }
        guard fresh.accessToken != stale.accessToken, Headers.isFieldValue(fresh.authorizationHeaderValue) else { return .none }
        remember(fresh, at: asked)
        return .fresh(fresh)
    }

    /// The upstream's Set-Cookie headers into tokend's jar; the cached Cookie headers are stale from then on.
    /// Whether tokend's jar took them all: when it did not, the client gets the answer's Set-Cookie as it
    /// came, so that a cookie the jar's rules reject (accept-cookies, a prefix, SameSite=None without
    /// Secure) is not lost. A refusal (the user may not write cookies: ImportCookies needs cookies-write)
    /// is logged once, and no later answer waits for it.
    @discardableResult
    func importCookies(_ setCookie: [String], from url: String) async -> Bool {
        do {
            let (version, _, rejected) = try await withTokend { client in
                try await client.importCookies(session: self.session, url: url, setCookie: setCookie)
            }
            state.withLock { state in
                state.version = max(state.version, version)
                state.cookies.removeAll(keepingCapacity: true)
            }
            guard rejected.isEmpty else {
                if !rejectionLogged.exchange(true, ordering: .relaxed) {
                    logger.warning(
                        "tokend's jar rejected some of the upstream's cookies: the client gets the answer's Set-Cookie as it came (logged once)",
                        metadata: ["rejected": "\(rejected.joined(separator: "; "))"])
                }
                return false
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

    /// The token tokend gave (asked for at `asked`), for the requests after this one.
    func remember(_ token: AccessToken, at asked: Double) {
        let expires = Double(token.expiresAt)
        let until = min(asked + (expires - asked) / 2, expires - 30)
        let (authorization, bound) = RequestCredentials.authorization(token)
        state.withLock { state in
            guard state.live, token.generation >= state.generation else { return }
            if let cached = state.token, cached.token.generation > token.generation { return }
            state.token = Cached(token: token, authorization: authorization, bound: bound, until: until)
        }
    }

    /// The cached token serves no more requests: the next one asks tokend.
    func forgetToken() {
        state.withLock { $0.token = nil }
    }

    /// Follows the session's events until the task is cancelled, again a second after the stream ends.
    /// Each time the stream begins, `learn` is told whose the session is (tokend's status names the owner
    /// of a session a user added); a status refused means the session is not this user's own.
    func follow(learn: @escaping @Sendable (PeerRule.Kind) -> Void = { _ in }) async {
        while !Task.isCancelled {
            do {
                let client = try await connectedTokend()
                if let kind = await sessionKind() { learn(kind) }
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

    /// Whose the session is, as tokend's status says (GetStatus names the owner of a session a user
    /// added); a status refused means the session is not this user's own, so one tokend.toml configures.
    /// Nil when tokend did not say (not there, or no such session).
    func sessionKind() async -> PeerRule.Kind? {
        do {
            let status = try await withTokend { client in try await client.status(session: self.session) }
            return status.owner.map { .owned(by: $0) } ?? .configured
        } catch TokendClientError.permissionDenied {
            return .configured
        } catch {
            return nil
        }
    }

    /// tokend, connected once and again after it restarts (one retry on a new connection), within
    /// `tokendTimeout`: a tokend that accepts and never answers (stopped, or stuck) costs a request that
    /// long, then `TokendTimedOut` (504). The connection it did not answer on is closed, so that what
    /// waits on it ends too and the next call connects again.
    func withTokend<T: Sendable>(_ body: @escaping @Sendable (TokendClient) async throws -> T) async throws -> T {
        let used = Mutex<TokendClient?>(nil)
        let answered = try await within(tokendTimeout) {
            var attempt = 0
            while true {
                attempt += 1
                let client = try await self.connectedTokend()
                used.withLock { $0 = client }
                do {
                    return try await body(client)
                } catch let error as TokendClientError {
                    guard case .unreachable(_, let reason) = error, attempt == 1 else { throw error }
                    self.tokend.withLock { if $0 === client { $0 = nil } }
                    self.logger.info("reconnecting to tokend", metadata: ["reason": "\(reason)"])
                    await client.close()
                }
            }
        }
        guard let answered else {
            if let stuck = used.withLock({ $0 }) {
                tokend.withLock { if $0 === stuck { $0 = nil } }
                await stuck.close()
            }
            throw TokendTimedOut(limit: tokendTimeout)
        }
        return answered
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

/// tokend took longer than --timeout to answer (it accepted, so it is there: stopped, or stuck).
struct TokendTimedOut: Error, CustomStringConvertible {
    let limit: Duration
    var description: String { "tokend did not answer within \(limit.components.seconds) s (--timeout)" }
}
