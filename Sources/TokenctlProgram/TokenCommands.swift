import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import Glibc

/// Which of the session's tokens: its own, or one for a resource (RFC 8707)
/// and a narrower scope, from the same login.
struct KeyOptions: ParsableArguments {
    @Option(help: "A resource the session serves (one of its resources in tokend.toml), e.g. https://api.example.com/.")
    var resource: String?
    @Option(help: "A scope narrower than the session's, space-separated, e.g. \"read\".")
    var scope: String?
}

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "token", abstract: "Print a valid access token.")
    @OptionGroup var common: Common
    @Flag(help: "Print `Authorization: <type> <token>` instead of the bare token.")
    var header = false
    @Option(help: "Seconds of validity the token must have left.")
    var minValid: Int?
    @OptionGroup var key: KeyOptions
    @Flag(help: "Print the token with its type, generation (name it after a 401: tokenctl refresh --stale-generation N) and expiresAt, as JSON.")
    var json = false

    func run() async throws {
        let client = try await common.connect()
        let token = try await common.run {
            try await client.token(
                session: common.session, minValidSeconds: minValid, resource: key.resource, scope: key.scope)
        }
        if json {
            print(jsonText(cliJSON(token.json)))
            return
        }
        if header { try refuseDPoPBound(token, by: "token --header") }
        print(header ? "Authorization: \(token.authorizationHeaderValue)" : token.accessToken)
    }
}

struct RefreshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Refresh the token (only if still at generation N with --stale-generation).")
    @OptionGroup var common: Common
    @Option(help: "The generation of the token the caller found stale.")
    var staleGeneration: Int?
    @OptionGroup var key: KeyOptions

    func run() async throws {
        let client = try await common.connect()
        let token = try await common.run {
            try await client.refresh(
                session: common.session, staleGeneration: staleGeneration, resource: key.resource, scope: key.scope)
        }
        print("generation \(token.generation), expires \(humanTime(token.expiresAt))")
    }
}
