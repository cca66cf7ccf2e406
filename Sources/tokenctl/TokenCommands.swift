import ArgumentParser
import Foundation
import TokendClient
import Glibc

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "token", abstract: "Print a valid access token.")
    @OptionGroup var common: Common
    @Flag(help: "Print `Authorization: <type> <token>` instead of the bare token.")
    var header = false
    @Option(help: "Seconds of validity the token must have left.")
    var minValid: Int?

    func run() async throws {
        let client = try await common.connect()
        let token = try await common.run { try await client.token(session: common.session, minValidSeconds: minValid) }
        print(header ? "Authorization: \(token.authorizationHeaderValue)" : token.accessToken)
    }
}

struct RefreshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Refresh the token (only if still at generation N with --stale-generation).")
    @OptionGroup var common: Common
    @Option(help: "The generation of the token the caller found stale.")
    var staleGeneration: Int?

    func run() async throws {
        let client = try await common.connect()
        let token = try await common.run {
            try await client.refresh(session: common.session, staleGeneration: staleGeneration)
        }
        print("generation \(token.generation), expires \(formatTime(token.expiresAt))")
    }
}
