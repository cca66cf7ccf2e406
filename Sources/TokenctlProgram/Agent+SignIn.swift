#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

extension Agent {
    func handle(_ signal: BusSignal) async {
        guard case .actionInvoked(let id, AgentDesktop.signInAction) = signal, let session = episodes.session(of: id) else {
            return
        }
        await signIn(session, notification: id)
    }

    /// The user chose Sign in: a browser login, its page opened through the
    /// portal. A second choice while it runs opens the same page again.
    private func signIn(_ session: String, notification: UInt32) async {
        if let running = signIns[session] {
            _ = try? await desktop.open(running.startURL)
            return
        }
        let client: TokendClient
        let login: BrowserLogin
        do {
            client = try await TokendClient.connect(socket: socket)
        } catch {
            return Self.say("session \(session): the sign-in could not begin: \(error)")
        }
        do {
            login = try await BrowserLogin.begin(client, session: session, redirectUri: nil)
        } catch TokendClientError.permissionDenied {
            // tokend's access tables say otherwise than the file read at start: say so, without the action.
            if let status = try? await client.status(session: session) {
                let (summary, body) = Self.words(status, mayLogIn: false, whoMay: "tokend's administrators")
                _ = try? await desktop.notify(summary: summary, body: body, signIn: false, replacing: notification)
            }
            await client.close()
            return Self.say("session \(session): tokend does not let this user sign it in")
        } catch {
            // A session with no browser login (no authorization endpoint, a listener that cannot bind): say
            // so where the user clicked, and which command to run instead.
            let flag = session == "default" ? "" : " --session \(session)"
            _ = try? await desktop.notify(
                summary: "Sign-in needed: \(session)",
                body: "Signing in from here did not begin: \(error)\nRun tokenctl login\(flag) --device in a terminal.",
                signIn: false, replacing: notification)
            await client.close()
            return Self.say("session \(session): the sign-in could not begin: \(error)")
        }
        signIns[session] = login
        do {
            switch try await desktop.open(login.startURL) {
            case .portal: Self.say("session \(session): sign-in page opened through the desktop portal")
            case .xdgOpen(let reason): Self.say("session \(session): no portal answered (\(reason)); sign-in page opened with xdg-open")
            }
        } catch {
            Self.say("session \(session): the portal did not open the sign-in page: \(error); open \(login.startURL) yourself")
        }
        Task { await self.finishSignIn(login, of: session, on: client) }
    }

    private func finishSignIn(_ login: BrowserLogin, of session: String, on client: TokendClient) async {
        do {
            let status = try await login.finish(client)
            Self.say("session \(session) signed in (\(status.state))")
        } catch {
            Self.say("session \(session): the sign-in did not finish: \(error)")
        }
        signIns[session] = nil
        await client.close()
    }
}
