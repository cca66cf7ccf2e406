import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
import TokendClient
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// tokenctl's exit codes (documented in tokenctl(1) and, from `meanings`, in `tokenctl --help`).
enum Exit {
    static let failure: Int32 = 1
    static let loginRequired: Int32 = 2
    static let unreachable: Int32 = 3
    static let upstreamUnavailable: Int32 = 4
    static let noSuchSession: Int32 = 5
    static let permissionDenied: Int32 = 6
    static let rateLimited: Int32 = 7
    /// The login was refused, expired or could not be completed.
    static let loginFailed: Int32 = 8
    /// A shared session's store (PostgreSQL) cannot be reached.
    static let storeUnavailable: Int32 = 9
    /// ArgumentParser's usage error (EX_USAGE).
    static let usage: Int32 = 64
    /// `tokenctl exec`: the command cannot be run (as a shell says it).
    static let commandNotRunnable: Int32 = 127
    /// Interrupted (Ctrl-C): the pending login was cancelled.
    static let interrupted: Int32 = 130

    /// Every code with what it means, in order: the help text is made from it.
    static let meanings: [(code: Int32, meaning: String)] = [
        (0, "success"), (failure, "failure"), (loginRequired, "login required"), (unreachable, "tokend unreachable"),
        (upstreamUnavailable, "token endpoint unavailable (tokend retries)"), (noSuchSession, "no such session"),
        (permissionDenied, "permission denied"), (rateLimited, "rate limited"),
        (loginFailed, "login refused, expired or failed"),
        (storeUnavailable, "the shared store of a fleet session cannot be reached (and no valid token is cached)"),
        (usage, "usage error"), (commandNotRunnable, "the command given to exec cannot be run"),
        (interrupted, "interrupted"),
    ]

    static var helpText: String {
        "Exit codes: " + meanings.map { "\($0.code) \($0.meaning)" }.joined(separator: ", ") + "."
    }
}

/// The socket alone, for commands that act on no one session (sessions,
/// metrics, shares, version): they take no --session rather than ignore one.
struct Connection: ParsableArguments {
    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else \(TokendClient.defaultSocket)).")
    var socket: String?

    var common: Common {
        // Parsed from nothing, not Common(): an @Option never decoded traps when read (the error advice reads session).
        var common = (try? Common.parse([])) ?? Common()
        common.socket = socket
        return common
    }
}

/// For commands that cover every session this user may read unless --session
/// names one (status, doctor, agent): the same options as Common, with that default said.
struct EverySession: ParsableArguments {
    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else \(TokendClient.defaultSocket)).")
    var socket: String?

    @Option(help: "Only this session (default: every session this user may read; tokend refuses a name it does not know).")
    var session: String?

    var common: Common {
        var common = (try? Common.parse([])) ?? Common()
        common.socket = socket
        common.session = session
        return common
    }
}

struct Common: ParsableArguments {
    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else \(TokendClient.defaultSocket)).")
    var socket: String?

    @Option(help: "The session to act on (default: \"default\"; tokend refuses a name it does not know).")
    var session: String?

    func connect() async throws -> TokendClient {
        try await run { try await TokendClient.connect(socket: socket) }
    }

    /// What status and doctor say of a tokend that accepts a connection and
    /// never replies (stopped, or its loop wedged): the fix, and exit 3.
    func wedged() -> ExitCode {
        let path = TokendClient.socketPath(socket)
        StandardStream.error.write(
            "tokenctl: tokend at \(path) accepts but does not answer within \(replySeconds) s\n  \(Self.wedgedFix)\n")
        return ExitCode(Exit.unreachable)
    }

    static let wedgedFix = "systemctl restart tokend; journalctl -u tokend says why it stopped answering"

    /// Runs a client call, turning its error into a message with the fix and an exit code.
    /// A call ends after `callSeconds` (a tokend that accepts and never answers: exit 3);
    /// `waiting` is for calls that wait for a person (a login being finished).
    func run<T: Sendable>(waiting: Bool = false, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            if waiting { return try await body() }
            guard let answer = try await answered(within: callSeconds, body) else {
                let path = TokendClient.socketPath(socket)
                StandardStream.error.write(
                    "tokenctl: tokend at \(path) did not answer within \(callSeconds) s (TOKENCTL_TIMEOUT)\n  "
                        + "\(Self.wedgedFix)\n")
                throw ExitCode(Exit.unreachable)
            }
            return answer
        } catch let error as TokendClientError {
            var flows: [String]? = nil
            switch error {
            case .loginRequired, .loginDenied, .loginExpired, .noSuchLogin, .flowUnavailable:
                flows = try? await TokendClient.connect(socket: socket).status(session: session).loginFlows
            case .permissionDenied:
                // Refused even what every admitted user may ask (its own access): the policy admits it to nothing.
                let socket = socket
                if case .permissionDenied? = await askingOwnAccess(socket: socket) {
                    StandardStream.error.write("tokenctl: \(error)\n  \(admittedToNothingAdvice())\n")
                    throw ExitCode(Exit.permissionDenied)
                }
            default: break
            }
            let (code, advice) = Self.advice(for: error, session: session, flows: flows)
            StandardStream.error.write("tokenctl: \(error)\(advice.isEmpty ? "" : "\n  \(advice)")\n")
            throw ExitCode(code)
        }
    }

    static func advice(for error: TokendClientError, session: String?, flows: [String]? = nil) -> (Int32, String) {
        let sessionFlag = session.map { " --session \($0)" } ?? ""
        let logins = StatusAdvice.logins(flows, flag: sessionFlag)
        let login = logins.count > 1 && logins[1].hasPrefix("or, ")
            ? "\(logins[0]) (or --browser)" : logins[0]
        switch error {
        case .unreachable(let socket, let reason) where reason.hasPrefix("permission denied"):
            return (Exit.unreachable,
                "tokend is there, but this user may not open its socket: `ls -l \(socket)` names the group that may; "
                    + "ask the administrator to add this user to it (then log in again), or point --socket at a share of yours.")
        case .flowUnavailable(let name, _):
            // A missing endpoint is the configuration's or the provider's, not an outage: nothing retries it.
            let other = (flows ?? []).map { "--\($0)" }
            return (Exit.failure,
                "This is tokend's configuration or the provider's, not an outage: set the endpoint in [sessions.\(name)] of "
                    + "tokend.toml (or an issuer whose discovery document names it), `tokend --check-config`, reload tokend; "
                    + "or log in another way (" + (other.isEmpty ? "" : other.joined(separator: ", ") + ", or ")
                    + "a refresh token on standard input).")
        case .unreachable:
            return (Exit.unreachable,
                "Start it with `systemctl start tokend.socket` (or `systemctl --user start tokend.socket`), or point --socket / TOKEND_SOCKET at the running tokend.")
        case .loginRequired:
            return (Exit.loginRequired, "Log in with: \(login)")
        case .upstreamUnavailable:
            return (Exit.upstreamUnavailable, "tokend keeps retrying; `tokenctl status\(sessionFlag)` shows the last error.")
        case .storeUnavailable:
            return (Exit.storeUnavailable,
                "The session is shared through PostgreSQL (shared-store), which this host cannot reach; tokend reconnects by itself. `tokenctl status\(sessionFlag)` shows the store's state.")
        case .noSuchSession:
            return (Exit.noSuchSession, "`tokenctl sessions` lists the configured sessions.")
        case .permissionDenied:
            return (Exit.permissionDenied, permissionDeniedAdvice(session: session))
        case .rateLimited:
            return (Exit.rateLimited,
                "Pass --stale-generation N (the generation of the token you hold): compare-and-refresh is not limited.")
        case .loginDenied, .loginExpired, .noSuchLogin:
            return (Exit.loginFailed, "Start again with: \(login)")
        case .loginFailed:
            return (Exit.loginFailed, "`tokenctl status\(sessionFlag)` and tokend's journal say more.")
        case .invalidCallback:
            return (Exit.loginFailed, "The browser was sent back with an answer to another login; start again.")
        case .tooManyConnections:
            return (Exit.unreachable, "Retry shortly; the limit is daemon.max-connections in tokend's configuration.")
        case .resourceNotAllowed:
            return (Exit.permissionDenied,
                "`tokenctl status\(sessionFlag)` says who may have each resource's tokens (resource access) and whether pages may.")
        case .tooManyKeys(_, _, let retryAfter, _):
            return (Exit.rateLimited,
                (retryAfter.map { "Retry in \($0) s, " } ?? "") + "or ask for a resource and scope this user already holds.")
        default:
            return (Exit.failure, "")
        }
    }
}

struct SessionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sessions", abstract: "List the configured sessions.")
    @OptionGroup var connection: Connection
    @Flag(help: "Print one JSON object per line: session, state, generation, expiresAt, and owner for a session a user added.")
    var json = false

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        let sessions = try await common.run { try await client.sessions() }
        for status in sessions {
            if json {
                var line: [String: JSONValue] = [
                    "session": .string(status.session), "state": .string(status.state), "generation": .int(status.generation),
                ]
                if let expiresAt = status.expiresAt { line["expiresAt"] = .int(expiresAt) }
                if let owner = status.owner { line["owner"] = .string(owner) }
                print(jsonText(cliJSON(.object(line))))
            } else {
                let expiry = status.expiresAt.map { "expires \(humanTime($0))" } ?? ""
                let owner = status.owner.map { "\towner \($0)" } ?? ""
                print("\(status.session)\t\(status.state)\tgeneration \(status.generation)\t\(expiry)\(owner)")
            }
        }
    }
}

struct LogoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout", abstract: "Forget the session's tokens here and revoke them at the server.")
    @OptionGroup var common: Common
    @Flag(help: "Do not call the revocation endpoint.")
    var noRevoke = false

    func run() async throws {
        let client = try await common.connect()
        try await common.run { try await client.logout(session: common.session, revoke: !noRevoke) }
        // A DPoP session whose key cannot sign here is forgotten without revoking (the reason is in its status).
        if !noRevoke, let reason = try? await client.status(session: common.session).lastError, reason.includes("not revoked") {
            print(reason)
        } else {
            print("logged out")
        }
    }
}

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print the session's events (token and cookie changes), one JSON object per line.")
    @OptionGroup var common: Common
    @Option(help: "First print the cookie changes made after this jar version (or a snapshot).")
    var sinceVersion: Int?

    func run() async throws {
        let client = try await common.connect()
        // A stream of events runs for as long as the user watches: no deadline.
        try await common.run(waiting: true) {
            for try await event in client.events(session: common.session, sinceVersion: sinceVersion) {
                StandardStream.output.write(jsonText(event.json) + "\n")
            }
        }
    }
}

struct CookiesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cookies",
        abstract: "Print the Cookie header tokend's jar has for a URL, or export the whole jar.",
        discussion: """
            tokenctl cookies https://app.example.com/   prints the Cookie header a browser would send.
            tokenctl cookies --export netscape > jar.txt; curl -b jar.txt URL   uses the jar with curl.
            tokenctl cookies --delete URL [--name N]   deletes what URL would get (--delete --all: the whole jar).
            """)
    @OptionGroup var common: Common
    @Argument(help: "The URL the cookies are for.")
    var url: String?
    @Flag(help: "Print the cookie list as JSON instead of the header.")
    var json = false
    @Option(help: "Print the whole jar in this format (netscape: curl/wget cookies.txt).")
    var export: String?
    @Flag(help: "Delete the cookies URL would get (every subscriber, browsers included, is told).")
    var delete = false
    @Option(help: "With --delete: only cookies of this name.")
    var name: String?
    @Flag(help: "With --delete and no URL or --name: the whole jar.")
    var all = false

    func validate() throws {
        if delete {
            if url == nil && name == nil && !all {
                throw ValidationError("--delete needs a URL, --name, or --all for the whole jar")
            }
            return
        }
        if name != nil || all { throw ValidationError("--name and --all go with --delete") }
        if let export, export != "netscape" {
            throw ValidationError("unknown export format \"\(export)\": use --export netscape")
        }
        if export == nil && url == nil { throw ValidationError("give a URL, or --export netscape for the whole jar") }
    }

    func run() async throws {
        let client = try await common.connect()
        if delete {
            let (version, deleted) = try await common.run {
                try await client.deleteCookies(session: common.session, url: url, name: name)
            }
            print("deleted \(deleted) cookie\(deleted == 1 ? "" : "s") (jar version \(version))")
            return
        }
        if export != nil {
            let text = try await common.run { try await client.exportCookies(session: common.session) }
            StandardStream.output.write(text)
            return
        }
        let set = try await common.run { try await client.cookies(session: common.session, url: url!) }
        print(json ? jsonText(cliJSON(set.json)) : set.header)
    }
}

/// How long any other call waits for tokend's answer: TOKENCTL_TIMEOUT seconds, 60 by default
/// (a refresh may wait for the provider, which tokend bounds by its own timeout).
let callSeconds: Int = {
    guard let text = ProcessInfo.processInfo.environment["TOKENCTL_TIMEOUT"], let seconds = Int(text), seconds > 0 else { return 60 }
    return min(seconds, 86400)
}()

/// How long status and doctor wait for tokend's reply: a wedged tokend
/// accepts connections (the kernel queues them) but never answers.
let replySeconds = 5

/// `body`'s result if it finishes within `seconds`, nil otherwise. A body
/// stuck in a call that ignores cancellation (a reply that never comes) is
/// abandoned, not awaited: tokenctl exits soon after. This is Deadline's
/// `within`, which tokenctl does not link.
func answered<T: Sendable>(
    within seconds: Int, _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    let waiting = Mutex<CheckedContinuation<T?, Error>?>(nil)
    let finish: @Sendable (Result<T?, Error>) -> Void = { result in
        waiting.withLock { $0.take() }?.resume(with: result)
    }
    return try await withCheckedThrowingContinuation { continuation in
        waiting.withLock { $0 = continuation }
        let work = Task {
            do { finish(.success(try await body())) } catch { finish(.failure(error)) }
        }
        Task {
            try? await Task.sleep(for: .seconds(seconds))
            finish(.success(nil))
            work.cancel()
        }
    }
}

struct Tokenctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenctl",
        abstract: "Ask tokend for tokens and manage its sessions.",
        discussion: Exit.helpText,
        version: Release.version,
        subcommands: [
            TokenCommand.self, RefreshCommand.self, StatusCommand.self, SessionsCommand.self, LoginCommand.self,
            LogoutCommand.self, WatchCommand.self, CookiesCommand.self, BrowserBridgeCommand.self,
            GitCredentialCommand.self, KubeCredentialCommand.self, ExecCommand.self, ProofCommand.self, MetricsCommand.self,
            DoctorCommand.self, ResetStrategyCommand.self, AgentCommand.self, ShareCommand.self, VersionCommand.self,
            AccessCommand.self, AddCommand.self, RemoveCommand.self, ProxyCommand.self,
        ])
}

/// tokenctl, as its program runs it (Sources/tokenctl/main.swift, and the multi-call tokend).
public func runTokenctl() async { await Tokenctl.main() }
