import ArgumentParser
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

#if canImport(Glibc)
import Glibc
#endif

struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Log a session in: with a device code, in a browser, or with a refresh token you already hold.",
        discussion: """
            tokenctl login --device      shows a code to enter on another device (headless hosts, SSH).
            tokenctl login --browser     opens the provider's sign-in page in this desktop's browser.
            tokenctl login < token.txt   hands tokend a refresh token (standard input or --refresh-token-file).
            With no flag: a refresh token when standard input is not a terminal, else --browser on a
            desktop and --device elsewhere. tokend makes every exchange itself; the refresh token never
            reaches tokenctl.
            """)
    @OptionGroup var common: Common
    @Flag(help: "Device authorization grant (RFC 8628): print a code and a URL, wait for approval.")
    var device = false
    @Flag(help: "Authorization code with PKCE in a browser, back to a listener on 127.0.0.1.")
    var browser = false
    @Flag(help: "With --browser: print the URL only, do not start a browser.")
    var noOpen = false
    @Option(help: ArgumentHelp(
        "With --browser: listen at this exact redirect URI, the session's redirect-uri (registered at the provider).",
        valueName: "http://127.0.0.1:PORT/PATH"))
    var redirectUri: String?
    @Option(help: "File holding the refresh token (default: standard input).")
    var refreshTokenFile: String?
    @Flag(help: "Print the result (the session's status, times as RFC 3339) as JSON; the prompts go to standard error.")
    var json = false

    func validate() throws {
        if [device, browser, refreshTokenFile != nil].filter({ $0 }).count > 1 {
            throw ValidationError("choose one of --device, --browser and --refresh-token-file")
        }
        if redirectUri != nil, device || refreshTokenFile != nil {
            throw ValidationError("--redirect-uri is for --browser")
        }
    }

    func run() async throws {
        let flow: String
        if device {
            flow = "device"
        } else if browser || redirectUri != nil {
            flow = "browser"
        } else if refreshTokenFile != nil || isatty(0) == 0 {
            return try await loginWithRefreshToken()
        } else {
            flow = hasDesktop ? "browser" : "device"
        }
        let client = try await common.connect()
        let status = flow == "device" ? try await deviceLogin(client) : try await browserLogin(client)
        StandardStream.error.write("Logged in.\n")
        show(status)
    }

    /// A prompt: on standard output, or standard error when that is the JSON's.
    func say(_ text: String) {
        if json { StandardStream.error.write(text + "\n") } else { print(text) }
    }

    func show(_ status: SessionStatus) {
        if json { print(jsonText(cliJSON(status.json))) } else { printStatus(status) }
    }

    var hasDesktop: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil
    }

    func deviceLogin(_ client: TokendClient) async throws -> SessionStatus {
        let login = try await common.run { try await client.beginLogin(session: common.session, flow: "device") }
        let cancel = cancelOnInterrupt(client, login)
        defer { cancel.cancel() }
        say("To log in, open \(login.verificationUri ?? "the provider's device page") and enter the code:")
        say("")
        say("    \(login.userCode ?? "")")
        say("")
        if let complete = login.verificationUriComplete { say("Or open \(complete)") }
        say("The code expires \(humanTime(login.expiresAt)).")
        fflush(nil)
        let progress = showWaiting("Waiting for approval")
        defer { progress.cancel() }
        return try await common.run(waiting: true) { try await client.finishLogin(id: login.id) }
    }

    func browserLogin(_ client: TokendClient) async throws -> SessionStatus {
        let browser: BrowserLogin
        do {
            browser = try await common.run {
                try await BrowserLogin.begin(client, session: common.session, redirectUri: redirectUri)
            }
        } catch let error as ListenerError {
            // Not even a free port on loopback: the device flow needs no listener.
            let hint = error.exactAddress ? "" : "  Use --device instead.\n"
            StandardStream.error.write("tokenctl: \(error)\n\(hint)")
            throw ExitCode(Exit.failure)
        }
        let cancel = cancelOnInterrupt(client, browser.login)
        defer { cancel.cancel() }
        say("Open this URL in a browser on this machine to log in:\n\n    \(browser.startURL)\n")
        fflush(nil)
        if !noOpen, hasDesktop { BrowserLogin.startBrowser(browser.startURL) }
        let progress = showWaiting("Waiting for the browser")
        defer { progress.cancel() }
        return try await common.run(waiting: true) { try await browser.finish(client) }
    }

    func loginWithRefreshToken() async throws {
        let text: String
        if let refreshTokenFile {
            guard let data = FileManager.default.contents(atPath: refreshTokenFile) else {
                StandardStream.error.write("tokenctl: cannot read \(refreshTokenFile)\n")
                throw ExitCode(Exit.failure)
            }
            text = String(decoding: data, as: UTF8.self)
        } else {
            text = readLine(strippingNewline: true) ?? ""
        }
        let token = text.trimmingWhitespaceAndNewlines
        guard !token.isEmpty else {
            StandardStream.error.write("tokenctl: no refresh token given (pipe it in or use --refresh-token-file)\n")
            throw ExitCode(Exit.failure)
        }
        let client = try await common.connect()
        let status: SessionStatus
        do {
            status = try await client.login(session: common.session, refreshToken: token)
        } catch .loginRequired(let session, let reason) {
            // The provider refused the token handed in: a refused login (8), not a session to log in (2).
            StandardStream.error.write("""
                tokenctl: the token endpoint refused this refresh token for session \(session) (\(reason))
                  \(Common.advice(for: .loginDenied(reason: reason), session: common.session).1)

                """)
            throw ExitCode(Exit.loginFailed)
        } catch {
            let _: Void = try await common.run { throw error }
            return
        }
        show(status)
        if status.state != "active" {
            // Stored, but not yet exchanged: the endpoint did not answer. tokend keeps trying it.
            let sessionFlag = common.session.map { " --session \($0)" } ?? ""
            StandardStream.error.write("""
                tokenctl: the refresh token is stored, but the token endpoint did not answer (\(status.lastError ?? status.state));                 tokend keeps retrying
                  `tokenctl status\(sessionFlag)` shows when it succeeds.

                """)
            throw ExitCode(Exit.upstreamUnavailable)
        }
    }

    /// On Ctrl-C: cancel the pending login in tokend, then exit 130. The
    /// cancel goes on a connection of its own: replies come in order, and the
    /// first connection waits for FinishLogin.
    func cancelOnInterrupt(_ client: TokendClient, _ login: PendingLogin) -> DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            Task {
                if let second = try? await TokendClient.connect(socket: client.socket) {
                    try? await second.cancelLogin(id: login.id)
                }
                StandardStream.error.write("\nLogin cancelled.\n")
                Glibc.exit(Exit.interrupted)
            }
        }
        source.resume()
        return source
    }

    /// "Waiting for approval... 12 s" on a terminal, once per second; a single line otherwise.
    func showWaiting(_ what: String) -> Task<Void, Never> {
        guard isatty(2) != 0 else {
            StandardStream.error.write("\(what) (Ctrl-C cancels)...\n")
            return Task {}
        }
        return Task {
            var seconds = 0
            while !Task.isCancelled {
                StandardStream.error.write("\r\(what) (Ctrl-C cancels)... \(seconds) s ")
                try? await Task.sleep(for: .seconds(1))
                seconds += 1
            }
            StandardStream.error.write("\n")
        }
    }
}
