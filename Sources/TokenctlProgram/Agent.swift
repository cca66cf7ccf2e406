#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import TokendClient

/// The agent: tokend's sessions as their events tell, the notifications
/// posted for them, and the sign-ins the user started from one.
actor Agent {
    let desktop: AgentDesktop
    let socket: String
    let only: String?
    let authority: AgentAuthority
    var episodes = AgentEpisodes()
    /// Browser logins the user started from a notification, by session.
    var signIns: [String: BrowserLogin] = [:]

    init(desktop: AgentDesktop, socket: String, only: String?, authority: AgentAuthority) {
        self.desktop = desktop
        self.socket = socket
        self.only = only
        self.authority = authority
    }

    /// Until the session bus goes away.
    func run() async {
        do {
            Self.say("notifications go to \(try await desktop.notificationServer())")
        } catch {
            Self.say("no notification server answers yet (\(error)); notifications are posted when one does")
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await signal in self.desktop.bus.signals { await self.handle(signal) }
            }
            group.addTask { await self.watchTokend() }
            await group.next()
            group.cancelAll()
        }
    }

    /// Stopped (the desktop session ends, systemctl stop): a notification's
    /// button works only while its sender listens, so none is left behind,
    /// and no login it began stays pending. The next agent posts again for
    /// what still needs a login.
    func stop() async {
        for id in episodes.posted { try? await desktop.close(id) }
        // Its sign-ins die with it: cancelled in tokend (on a connection of their own, as login's Ctrl-C does).
        if !signIns.isEmpty, let client = try? await TokendClient.connect(socket: socket) {
            for login in signIns.values { try? await client.cancelLogin(id: login.login.id) }
        }
        Self.say("stopped")
        exit(0)
    }

    static func say(_ line: String) {
        StandardStream.error.write("tokenctl agent: \(line)\n")
    }

    /// Watches each readable session; when tokend goes away (a restart),
    /// connects again, waiting longer each time up to 30 s.
    private func watchTokend() async {
        var pause = 1
        var first = true
        var said: String?
        while !Task.isCancelled {
            do {
                let client = try await TokendClient.connect(socket: socket)
                let sessions = try await client.sessions().filter(concerns)
                pause = 1
                said = nil
                if sessions.isEmpty {
                    Self.say("no session this user may read at \(socket) (tokenctl doctor checks this user's access)")
                }
                await watch(sessions, client: client, atStart: first)
                first = false
                await client.close()
            } catch {
                let text = "\(error)"
                if text != said { Self.say("\(text); trying again") }
                said = text
            }
            try? await Task.sleep(for: .seconds(pause))
            pause = min(pause * 2, 30)
        }
    }

    /// The sessions this agent watches: the one --session names, else all this user may read but
    /// another person's own (an administrator lists those; their owner's agent tells them).
    private func concerns(_ status: SessionStatus) -> Bool {
        (only == nil || status.session == only) && authority.concerns(owner: status.owner)
    }

    /// How often the list of sessions is asked again: tokend tells no one
    /// of a session a reload adds. TOKENCTL_AGENT_RELIST (seconds) sets it
    /// for a test that waits for the next list.
    static let relistSeconds = ProcessInfo.processInfo.environment["TOKENCTL_AGENT_RELIST"].flatMap { Int($0) }
        .map { max(1, $0) } ?? 60

    /// Watches `sessions`, and those that appear later, until none is left
    /// to watch (tokend went away) or tokend no longer answers the list.
    private func watch(_ sessions: [SessionStatus], client: TokendClient, atStart: Bool) async {
        await withTaskGroup(of: String?.self) { group in
            var watched: Set<String> = []
            var found = sessions
            var asAtStart = atStart
            while true {
                for status in found where !watched.contains(status.session) {
                    // A session first seen is judged as at the start: announced to those who may sign it in.
                    await reconcile(status, atStart: asAtStart)
                    watched.insert(status.session)
                    group.addTask {
                        await self.watch(status.session, client: client)
                        return status.session
                    }
                }
                if !found.isEmpty { Self.say("watching \(watched.sorted().joined(separator: ", "))") }
                asAtStart = true
                group.addTask {
                    try? await Task.sleep(for: .seconds(Self.relistSeconds))
                    return nil
                }
                found = []
                // Until the list is due again (nil), letting go of each session whose watch ended.
                while let ended = await group.next() {
                    guard let session = ended else { break }
                    watched.remove(session)
                    if watched.isEmpty { break }
                }
                guard !watched.isEmpty, let now = try? await client.sessions() else { break }
                found = now.filter(concerns)
            }
            group.cancelAll()
        }
    }

    /// One session's events until tokend goes away or drops the session; a
    /// stream that ends while the session is still there (a reload replaced
    /// it) is started again. Each event that may change its state is checked
    /// against its status.
    private func watch(_ session: String, client: TokendClient) async {
        while !Task.isCancelled {
            do {
                for try await event in client.events(session: session) {
                    if ["cookies", "loginPending", "strategyReset"].contains(event.event) { continue }
                    await reconcile(try await client.status(session: session), atStart: false)
                }
                await reconcile(try await client.status(session: session), atStart: false)
            } catch TokendClientError.noSuchSession {
                return await ended(session)
            } catch {
                return  // tokend went away: watchTokend connects again
            }
        }
    }

    private func ended(_ session: String) async {
        if case .close(let id)? = episodes.observe(session: session, state: "gone") { await close(id, session: session) }
    }

    private func reconcile(_ status: SessionStatus, atStart: Bool) async {
        let session = status.session
        let mayLogIn = authority.mayLogIn(session, owner: status.owner)
        switch episodes.observe(session: session, state: status.state, announce: !atStart || mayLogIn) {
        case .post?:
            let (summary, body) = Self.words(
                status, mayLogIn: mayLogIn, whoMay: authority.whoMay(session, owner: status.owner))
            do {
                let id = try await desktop.notify(summary: summary, body: body, signIn: mayLogIn)
                Self.say("session \(session) needs a login: notification \(id)")
                if case .close(let stale)? = episodes.posted(session: session, id: id) { await close(stale, session: session) }
            } catch {
                Self.say("session \(session) needs a login, and the notification could not be posted: \(error)")
            }
        case .close(let id)?:
            await close(id, session: session)
        case nil:
            break
        }
    }

    func close(_ id: UInt32, session: String) async {
        do {
            try await desktop.close(id)
            Self.say("session \(session) needs no login now: notification \(id) closed")
        } catch {
            Self.say("notification \(id) could not be closed: \(error)")
        }
    }

    /// The notification's summary and body: the session, why, and who may sign it in.
    static func words(_ status: SessionStatus, mayLogIn: Bool, whoMay: String) -> (String, String) {
        let summary = "Sign-in needed: \(status.session)"
        var why = status.lastError ?? "tokend holds no usable refresh token for it"
        if let first = why.first { why = first.uppercased() + why.dropFirst() }
        if !why.hasSuffix(".") { why += "." }
        let account = (status.username ?? status.email).map { " (\($0))" } ?? ""
        let session = "tokend's session \(status.session)\(account) gives no tokens until someone signs in. \(why)"
        guard mayLogIn else {
            let flag = status.session == "default" ? "" : " --session \(status.session)"
            return (summary, "\(session)\nOnly \(whoMay) can sign it in: ask them to run tokenctl login\(flag).")
        }
        return (summary, "\(session)\nSign in opens the provider's page in your browser.")
    }
}
