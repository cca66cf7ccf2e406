import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// `tokenctl access`: what this user (or, for root and tokend's admins, another) may do
/// with each session, from the policy tokend holds: `kubectl auth can-i` for tokend.
struct AccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access", abstract: "Say what this user (or --user) may do with each session.",
        discussion: """
            One line per session this user may read (every session for an admin): read (tokens, status, \
            cookies), log in (and out), share, write cookies, the web origins whose pages may use it, and the \
            resources whose tokens resource-access keeps from the user. From the [access] and \
            [sessions.NAME.access] tables tokend runs with. --user: root and tokend's admins only.
            """)
    @OptionGroup var scope: EverySession
    var common: Common { scope.common }
    @Option(help: "Another user (a name or uid): root and tokend's admins only (default: this user).")
    var user: String?
    @Flag(help: "Print one JSON object per session: session, read, login, cookiesWrite, share, pages, deniedResources.")
    var json = false

    func validate() throws {
        // A name tokend cannot find would come back as "tokend rejected the parameter user".
        if let user, UInt32(user) == nil, getpwnam(user) == nil {
            throw ValidationError("--user \(user): there is no such user on this host")
        }
    }

    func run() async throws {
        let client = try await common.connect()
        let answer = try await common.run { try await client.access(session: common.session, user: user) }
        if json {
            for line in answer.sessions {
                print(jsonText(cliJSON((try? JSONValue(encoding: line)) ?? .null)))
            }
            return
        }
        if answer.sessions.isEmpty {
            print("\(answer.user) may read no session: [access] read-users and read-groups (or a session's own) admit readers.")
        }
        for line in answer.sessions { print("\(line.session): \(Self.words(line))") }
    }

    /// "read, share, log in; pages of https://app.example.com; not the tokens of https://admin.example.com/".
    static func words(_ access: BrokerInterface.SessionAccess) -> String {
        guard access.read || access.login || access.cookiesWrite else { return "nothing" }
        var may: [String] = []
        if access.read { may += ["read", "share"] }
        if access.login { may.append("log in") }
        if access.cookiesWrite { may.append("write cookies") }
        var parts = [may.joined(separator: ", ")]
        if !access.pages.isEmpty { parts.append("pages of " + access.pages.joined(separator: ", ")) }
        if !access.deniedResources.isEmpty {
            parts.append("not the tokens of " + access.deniedResources.joined(separator: ", "))
        }
        return parts.joined(separator: "; ")
    }
}
