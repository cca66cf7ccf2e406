import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

#if canImport(Glibc)
import Glibc
#endif

/// `tokenctl add`: a session of this user's own, from a resource's URL (an MCP
/// server's) or an authorization server's; tokend discovers and registers the rest.
struct AddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Add a session of your own, from a resource's URL (an MCP server's) or an authorization server's.",
        discussion: """
            tokenctl add mcp --resource https://mcp.example.com/mcp   discovers the server's authorization server \
            (RFC 9728, RFC 8414) and registers a client there (RFC 7591). Then log it in with tokenctl \
            login (it prints how), and point an agent at it with tokenctl proxy mcp. \
            The session is yours alone: its full name is USER/NAME, and NAME means it wherever you give it. \
            The administrator allows this in [user-sessions] of tokend.toml.
            """)
    @OptionGroup var connection: Connection
    @Argument(help: "The session's name: letters, digits, '-', '_' and '.' (its full name is USER/NAME).")
    var name: String
    @Option(name: .customLong("resource"), help: ArgumentHelp(
        "A resource the session's tokens are for (RFC 8707), e.g. an MCP server's URL (repeat for more).",
        discussion: "Without --issuer, the first one's metadata names the authorization server.", valueName: "url"))
    var resources: [String] = []
    @Option(help: ArgumentHelp("The authorization server (its issuer URL), when no resource names it.", valueName: "url"))
    var issuer: String?
    @Option(help: "A client registered at the server already (default: tokend registers one).")
    var clientId: String?
    @Option(help: "The scope to ask for, space-separated (default: the one the server names).")
    var scope: String?
    @Flag(help: "Bind the tokens to a key of tokend's (DPoP, RFC 9449), on your budget of keys.")
    var dpop = false
    @Flag(help: "Print AddSession's answer as JSON: status, issuer, clientId, registered.")
    var json = false

    func validate() throws {
        try UserSessionAdvice.checkName(name)
        guard !resources.isEmpty || issuer != nil else {
            throw ValidationError("give --resource URL (an MCP server's, say) or --issuer URL: tokend starts there")
        }
        for resource in resources { try UserSessionAdvice.checkURL(resource, option: "--resource") }
        if let issuer { try UserSessionAdvice.checkURL(issuer, option: "--issuer") }
        if clientId?.isEmpty == true { throw ValidationError("--client-id is empty: give the id, or leave it out") }
        if let scope, scope.trimmingWhitespace.isEmpty {
            throw ValidationError("--scope is empty: give scopes separated by spaces, or leave it out")
        }
    }

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        let (name, issuer, clientId, resources, scope, dpop) = (name, issuer, clientId, resources, scope, dpop)
        let added = try await userSessionRun(common, { UserSessionAdvice.add($0, name: name) }) {
            try await client.addSession(
                name: name, issuer: issuer, clientId: clientId, resources: resources.isEmpty ? nil : resources,
                scope: scope, dpop: dpop ? true : nil)
        }
        if json {
            print(jsonText(cliJSON(added.json)))
            return
        }
        print(Self.text(added, name: name, scope: scope))
    }

    /// What was added and found, and what to do next.
    static func text(_ added: AddedSession, name: String, scope: String?) -> String {
        let status = added.status
        var lines = ["added session \(status.session)" + (status.owner.map { ", yours (\($0)'s); \(name) names it" } ?? "")]
        lines.append("  authorization server  \(added.issuer)")
        lines.append("  client                "
            + (added.registered ? "\(added.clientId), registered by tokend (RFC 7591)" : "\(added.clientId), as given"))
        if !status.resources.isEmpty { lines.append("  resources             \(status.resources.joined(separator: " "))") }
        lines.append("  scope                 " + (scope.map { "\"\($0)\"" } ?? "as the server names it (its challenge or metadata)"))
        if let redirect = status.redirectUri { lines.append("  redirect URI          \(redirect)") }
        if let dpop = status.dpop { lines.append("  DPoP                  key in the \(dpop.keyStorage)") }
        lines.append("Next, log it in:  \(UserSessionAdvice.nextLogin(name: name, flows: status.loginFlows))")
        if !status.resources.isEmpty {
            lines.append("Then point an agent at it:  tokenctl proxy \(name)  (docs/mcp.md)")
        }
        return lines.joined(separator: "\n")
    }
}

/// `tokenctl remove`: forgets a session a user added, revoked at the provider first.
struct RemoveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove a session you added: its tokens are revoked at the server, then tokend forgets it.",
        discussion: """
            Its owner may, and tokend's administrators (who name it USER/NAME). The sessions of tokend.toml are \
            removed there by the administrator.
            """)
    @OptionGroup var connection: Connection
    @Argument(help: "The session: your NAME, or USER/NAME.")
    var name: String
    @Flag(help: "Do not call the revocation endpoint (the server keeps the grant until it expires).")
    var noRevoke = false

    func validate() throws {
        // An administrator names another's USER/NAME.
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, !parts.contains(where: \.isEmpty) else {
            throw ValidationError("session name \"\(name)\": give NAME, or USER/NAME")
        }
        try UserSessionAdvice.checkName(String(parts.last!))
    }

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        let (name, revoke) = (name, !noRevoke)
        let advice: @Sendable (TokendClientError) async -> (code: Int32, advice: String)? = { error in
            guard case .noSuchSession = error else { return UserSessionAdvice.remove(error, name: name, yours: []) }
            return UserSessionAdvice.remove(error, name: name, yours: await Self.ownNames(client))
        }
        let revoked = try await userSessionRun(common, advice) {
            try await client.removeSession(name, revoke: revoke)
        }
        print("removed session \(name)" + (revoked ? "; its tokens are revoked at the server"
            : revoke ? "; the server did not take the revocation (tokend's journal says why): its grant may still be valid there"
            : "; not revoked at the server"))
    }

    /// The bare names of this user's own sessions (for the message when NAME is none of them).
    static func ownNames(_ client: TokendClient) async -> [String] {
        guard let me = getpwuid(getuid()).flatMap({ String(validatingCString: $0.pointee.pw_name) }),
            let sessions = try? await answered(within: replySeconds, { try await client.sessions() })
        else { return [] }
        return sessions.filter { $0.owner == me }.map { String($0.session.split(separator: "/").last ?? "") }
    }
}

/// Runs an AddSession or RemoveSession call: the errors `advice` knows get its words and exit code;
/// the others go to `Common.run`.
@discardableResult
func userSessionRun<T: Sendable>(
    _ common: Common, _ advice: @escaping @Sendable (TokendClientError) async -> (code: Int32, advice: String)?,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await common.run {
        do {
            return try await body()
        } catch let error as TokendClientError {
            guard let (code, fix) = await advice(error) else { throw error }
            StandardStream.error.write("tokenctl: \(UserSessionAdvice.message(error))\n  \(fix)\n")
            throw ExitCode(code)
        }
    }
}
