import ArgumentParser
import Config
import Dispatch
import Foundation
import Glibc
import TokendClient

struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Say on the desktop when a session needs a sign-in, and make it one click.",
        discussion: """
            Runs in a desktop session (tokend-agent.service or the autostart entry start it; one per session \
            bus) and watches every \
            session this user may read. When one needs a login, it posts one notification saying which and why; \
            its Sign in button starts a browser login as `tokenctl login --browser` does and opens the page \
            through the desktop portal (xdg-open when no portal answers). A user who may not sign the session in \
            is told who may. The notification closes when the session is active again. The agent changes \
            nothing in tokend by itself. Without a session bus it says so and exits 1.
            """)
    @OptionGroup var common: Common
    @Option(help: "tokend's configuration, read for who may sign in (default: $TOKEND_CONFIG, else /etc/tokend/tokend.toml).")
    var config: String?

    func run() async throws {
        let bus: AgentBus
        do {
            bus = try AgentBus.connectSession()
        } catch where error.name == AgentBus.alreadyRunning {
            return Agent.say("\(error): this one ends")
        } catch {
            Agent.say(
                "no desktop session bus (\(error)). It runs inside a desktop session, which sets "
                    + "DBUS_SESSION_BUS_ADDRESS or has $XDG_RUNTIME_DIR/bus: start it from the desktop "
                    + "(systemctl --user start tokend-agent, or log in again for its autostart entry)")
            throw ExitCode(Exit.failure)
        }
        let environment = ProcessInfo.processInfo.environment
        let configPath = config ?? environment["TOKEND_CONFIG"] ?? "/etc/tokend/tokend.toml"
        let socket = TokendClient.socketPath(common.socket)
        let tables: AccessTables?
        do {
            tables = try Configuration.accessTables(path: configPath)
        } catch {
            tables = nil
            Agent.say("\(error): who may sign in is left to tokend to say when asked")
        }
        let authority = AgentAuthority(
            tables: tables, tokendUID: DoctorSocketCheck.identity(of: SocketFacts.probe(socket))?.uid, person: .current())
        let agent = Agent(desktop: AgentDesktop(bus: bus), socket: socket, only: common.session, authority: authority)
        let stopping = [SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { Task { await agent.stop() } }
            source.resume()
            return source
        }
        defer { stopping.forEach { $0.cancel() } }
        await agent.run()
        Agent.say("the session bus connection ended")
        throw ExitCode(Exit.failure)
    }
}

/// The agent: tokend's sessions as their events tell, the notifications
/// posted for them, and the sign-ins the user started from one.
actor Agent {
    let desktop: AgentDesktop
    let socket: String
    let only: String?
    let authority: AgentAuthority
    private var episodes = AgentEpisodes()
    /// Browser logins the user started from a notification, by session.
    private var signIns: [String: BrowserLogin] = [:]

    init(desktop: AgentDesktop, socket: String, only: String?, authority: AgentAuthority) {
        self.desktop = desktop
        self.socket = socket
        self.only = only
        self.authority = authority
    }

    /// Until the session bus goes away.
    func run() async {
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
    /// button works only while its sender listens, so none is left behind.
    /// The next agent posts again for what still needs a login.
    func stop() async {
        for id in episodes.posted { try? await desktop.close(id) }
        Self.say("stopped")
        exit(0)
    }

    static func say(_ line: String) {
        FileHandle.standardError.write(Data("tokenctl agent: \(line)\n".utf8))
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
                let sessions = try await client.sessions().filter { only == nil || $0.session == only }
                for status in sessions { await reconcile(status, atStart: first) }
                first = false
                pause = 1
                said = nil
                Self.say(
                    sessions.isEmpty
                        ? "no session this user may read at \(socket) (tokenctl doctor checks this user's access)"
                        : "watching \(sessions.map(\.session).joined(separator: ", "))")
                await withTaskGroup(of: Void.self) { group in
                    for status in sessions {
                        group.addTask { await self.watch(status.session, client: client) }
                    }
                }
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

    /// One session's events until its stream ends; each that may change its state is checked against its status.
    private func watch(_ session: String, client: TokendClient) async {
        do {
            for try await event in client.events(session: session) {
                if ["cookies", "loginPending", "strategyReset"].contains(event.event) { continue }
                await reconcile(try await client.status(session: session), atStart: false)
            }
        } catch TokendClientError.noSuchSession {
            await ended(session)
        } catch {
            // tokend went away: watchTokend connects again.
        }
    }

    private func ended(_ session: String) async {
        if case .close(let id)? = episodes.observe(session: session, state: "gone") { await close(id, session: session) }
    }

    private func reconcile(_ status: SessionStatus, atStart: Bool) async {
        let session = status.session
        let mayLogIn = authority.mayLogIn(session)
        switch episodes.observe(session: session, state: status.state, announce: !atStart || mayLogIn) {
        case .post?:
            let (summary, body) = Self.words(status, mayLogIn: mayLogIn, whoMay: authority.whoMay(session))
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

    private func close(_ id: UInt32, session: String) async {
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

    private func handle(_ signal: BusSignal) async {
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
