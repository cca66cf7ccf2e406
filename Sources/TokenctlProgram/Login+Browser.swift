#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

/// A browser login as tokenctl makes one: a loopback listener (at the
/// session's redirect-uri when it names one), BeginLogin, the start URL the
/// browser is sent to, then the listener's callbacks until one finishes the
/// login. `tokenctl login --browser` and `tokenctl agent` both use it.
struct BrowserLogin: Sendable {
    let listener: LoopbackListener
    let login: PendingLogin

    /// Where to send the browser: our listener's start page, which redirects
    /// to the provider (the authorization URL goes on no command line).
    var startURL: String { listener.startURL }

    /// Listens and begins the login. `redirectUri` nil: the session's own, else a free port.
    /// Throws ListenerError when it cannot listen, TokendClientError when tokend refuses.
    static func begin(_ client: TokendClient, session: String?, redirectUri asked: String?) async throws -> BrowserLogin {
        let status = try await client.status(session: session)
        // A session with a redirect-uri takes browser logins only there (the provider registered it): said
        // here, before anything listens, with the command for this session (the same without --redirect-uri).
        if let own = status.redirectUri, let asked, asked != own {
            let flag = status.session == "default" ? "" : " --session \(status.session)"
            throw TokendClientError.loginFailed(
                reason: "session \(status.session) takes browser logins only at its redirect-uri \(own), not \(asked): "
                    + "log in with `tokenctl login\(flag) --browser` (it listens there)")
        }
        let redirectUri = asked ?? status.redirectUri
        let listener = try LoopbackListener(redirectURI: redirectUri)
        let login = try await client.beginLogin(session: session, flow: "browser", redirectURI: listener.redirectURI)
        return BrowserLogin(listener: listener, login: login)
    }

    /// Serves the browser until a callback finishes the login. A callback
    /// that answers another login is refused and waited past; when the login
    /// expires it is cancelled in tokend (TokendClientError.loginExpired).
    func finish(_ client: TokendClient) async throws(TokendClientError) -> SessionStatus {
        let deadline = Date(timeIntervalSince1970: TimeInterval(login.expiresAt))
        let authorizationURL = login.authorizationUrl ?? ""
        while let (callback, connection) = await listener.nextCallback(until: deadline, authorizationURL: authorizationURL) {
            do {
                let status = try await client.finishLogin(id: login.id, callbackURL: callback)
                let who = status.username ?? status.email ?? status.subject
                LoopbackListener.respond(
                    connection, status: "200 OK", title: "Logged in",
                    message: "tokend holds the session\(who.map { " of \($0)" } ?? ""). You can close this tab.")
                return status
            } catch .invalidCallback(let reason) {
                // Not the answer to this login (a stale tab, another program): keep waiting.
                LoopbackListener.respond(connection, status: "400 Bad Request", title: "Not accepted", message: reason)
                StandardStream.error.write("\ntokenctl: ignored a callback: \(reason)\n")
            } catch {
                LoopbackListener.respond(
                    connection, status: "200 OK", title: "Login failed", message: "\(error) You can close this tab.")
                throw error
            }
        }
        try? await client.cancelLogin(id: login.id)
        throw .loginExpired(reason: "the browser did not come back in time")
    }

    /// Starts the desktop's browser on `url` with xdg-open, not waiting for it.
    static func startBrowser(_ url: String) {
        ChildProcess.start("/usr/bin/env", arguments: ["xdg-open", url], capture: false)?.reapWhenItEnds()
    }
}
