import ArgumentParser
import Config
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
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
    @OptionGroup var scope: EverySession
    var common: Common { scope.common }
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
