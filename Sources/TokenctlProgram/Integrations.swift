import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback
import TokendClient
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// git's credential helper protocol (gitcredentials(7)):
///     git config --global credential.https://git.example.com.helper "!tokenctl git-credential"
/// `get` answers with the session's access token; `erase` with that token
/// means the server refused it, so tokend compare-and-refreshes (fifty git
/// processes hitting the same 401 cause one refresh); `store` does nothing.
struct GitCredentialCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "git-credential",
        abstract: "git credential helper: access tokens for the hosts a session lists in git-hosts.")
    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else \(TokendClient.defaultSocket)).")
    var socket: String?
    @Option(help: "Answer for this session only, when its git-hosts lists the host (default: the session whose git-hosts lists it).")
    var session: String?
    @Argument(help: "get, store or erase (git passes it).")
    var operation: String
    /// For a host whose API is one of the session's resources:
    ///     credential.https://git.example.com.helper "!tokenctl git-credential --resource https://git.example.com/"
    @OptionGroup var key: KeyOptions

    /// git ignores a helper's exit status and goes on to its next helper (gitcredentials(7)), so every
    /// "no credential from here" — tokend unreachable, no session for the host, a login required — exits 0
    /// with the reason on stderr, as git credential-cache does when its daemon is not running. Only a
    /// mistake in how the helper is configured exits non-zero: a usage error, or --session naming a
    /// session tokend does not know (5, like every command).
    func run() async throws {
        let request = Self.readRequest()
        let asked = operation == "get" || operation == "erase"  // store: tokend keeps the token
        guard asked || session != nil else { return }
        guard let client = try? await TokendClient.connect(socket: socket) else {
            StandardStream.error.write(
                "tokenctl git-credential: tokend is not reachable at \(TokendClient.socketPath(socket)): no token from it\n")
            return
        }
        if let session {
            do {
                _ = try await client.status(session: session)
            } catch .noSuchSession {
                let (code, advice) = Common.advice(for: .noSuchSession(session: session), session: session)
                StandardStream.error.write("tokenctl: \(TokendClientError.noSuchSession(session: session))\n  \(advice)\n")
                throw ExitCode(code)
            } catch {
                StandardStream.error.write("tokenctl git-credential: \(error)\n")
                return
            }
        }
        guard asked, let host = request.fields["host"] else { return }
        // A bearer token travels only encrypted, or to this machine.
        guard Loopback.isSafeScheme(request.fields["protocol"], host: Self.withoutPort(host)) else {
            StandardStream.error.write(
                "tokenctl git-credential: no token for \(request.fields["protocol"] ?? "?")://\(host): only https (or http to 127.0.0.1/[::1])\n")
            return
        }
        guard let sessions = try? await client.sessions(),
            let session = sessions.first(where: { $0.gitHosts.contains(host) && (self.session ?? $0.session) == $0.session })
        else { return }  // not ours: git asks the next helper
        do {
            let token = try await client.token(session: session.session, resource: key.resource, scope: key.scope)
            if operation == "erase" {
                let refused = request.fields["password"] ?? request.fields["credential"]
                // Only the token we handed out, and only while it is current, triggers a refresh.
                if refused == token.accessToken {
                    _ = try await client.refresh(
                        session: session.session, staleGeneration: token.generation, resource: key.resource, scope: key.scope)
                }
                return
            }
            if token.isDPoPBound {
                // git sends the token alone: left to the next helper, with the reason.
                try? refuseDPoPBound(token, by: "git-credential")
                return
            }
            var answer: [(String, String)]
            if request.capabilities.contains("authtype") {
                answer = [("capability[]", "authtype"), ("authtype", "Bearer"), ("credential", token.accessToken),
                          ("ephemeral", "true")]
            } else {
                answer = [("username", session.gitUsername ?? "oauth2"), ("password", token.accessToken)]
            }
            answer.append(("password_expiry_utc", String(token.expiresAt)))
            print(answer.map { "\($0.0)=\($0.1)" }.joined(separator: "\n"))
        } catch {
            StandardStream.error.write("tokenctl git-credential: \(error)\n")
        }
    }

    /// git's `host` field is host[:port]; an IPv6 literal keeps its brackets.
    static func withoutPort(_ host: String) -> String {
        if host.hasPrefix("["), let end = host.firstIndex(of: "]") { return String(host[...end]) }
        return host.split(separator: ":", maxSplits: 1).first.map(String.init) ?? host
    }

    struct Request {
        var fields: [String: String] = [:]
        var capabilities: Set<String> = []
    }

    /// key=value lines up to a blank line or the end of input.
    static func readRequest() -> Request {
        var request = Request()
        while let line = readLine(strippingNewline: true), !line.isEmpty {
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = String(line[..<equals])
            let value = String(line[line.index(after: equals)...])
            if key == "capability[]" {
                request.capabilities.insert(value)
            } else {
                request.fields[key] = value
            }
        }
        return request
    }
}

/// kubectl's exec credential plugin: prints an ExecCredential with the token
/// and its expiry, so kubectl caches it until shortly before then.
///     users: [{name: me, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: tokenctl,
///              args: [kube-credential], interactiveMode: Never}}}]
struct KubeCredentialCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kube-credential", abstract: "kubectl exec credential plugin: an ExecCredential for the session.")
    @OptionGroup var common: Common
    @OptionGroup var key: KeyOptions

    func run() async throws {
        let client = try await common.connect()
        let token = try await common.run {
            try await client.token(session: common.session, resource: key.resource, scope: key.scope)
        }
        try refuseDPoPBound(token, by: "kube-credential")
        let expiry = rfc3339(token.expiresAt)
        let credential: JSONValue = [
            "apiVersion": .string(Self.apiVersion(ProcessInfo.processInfo.environment["KUBERNETES_EXEC_INFO"])),
            "kind": "ExecCredential",
            "status": ["token": .string(token.accessToken), "expirationTimestamp": .string(expiry)],
        ]
        StandardStream.output.write(JSONWriter.string(credential) + "\n")
    }

    /// The apiVersion kubectl asked for in KUBERNETES_EXEC_INFO; v1 by default.
    static func apiVersion(_ info: String?) -> String {
        let known = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]
        guard let info, let version = (try? JSONParser.parse(info))?["apiVersion"]?.stringValue, known.contains(version)
        else { return known[0] }
        return version
    }
}

/// Runs a command with BEARER_TOKEN set (the WLCG bearer token discovery convention).
struct ExecCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec", abstract: "Run a command with BEARER_TOKEN set to the session's access token.")
    @OptionGroup var common: Common
    @OptionGroup var key: KeyOptions
    @Argument(parsing: .captureForPassthrough, help: "The command and its arguments (after --).")
    var command: [String]

    /// -h and --help before the command (or before --) ask for this help, not for a run.
    func validate() throws {
        if command.prefix(while: { $0 != "--" }).contains(where: { $0 == "-h" || $0 == "--help" }) {
            throw CleanExit.helpRequest(self)
        }
    }

    func run() async throws {
        let arguments = command.first == "--" ? Array(command.dropFirst()) : command
        guard let program = arguments.first else { throw ValidationError("name a command: tokenctl exec -- COMMAND") }
        let client = try await common.connect()
        let token = try await common.run {
            try await client.token(session: common.session, resource: key.resource, scope: key.scope)
        }
        setenv("BEARER_TOKEN", token.accessToken, 1)
        // "DPoP": the token is useless without a proof per request (tokenctl proof).
        setenv("TOKEND_TOKEN_TYPE", token.isDPoPBound ? "DPoP" : "Bearer", 1)
        ProgramSignals.resetForExec()
        let argv = arguments.map { strdup($0) } + [nil]
        execvp(program, argv)
        StandardStream.error.write("tokenctl: cannot run \(program): \(String(cString: strerror(errno)))\n")
        throw ExitCode(Exit.commandNotRunnable)
    }
}
