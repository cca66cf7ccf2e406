import ArgumentParser
import Foundation
import TokendClient
import TokendInterface
import Varlink

/// tokenctl's version and the running tokend's: a mismatch after an upgrade
/// (tokend not restarted) shows here.
struct VersionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "version", abstract: "Print tokenctl's version and the running tokend's.")
    @OptionGroup var connection: Connection
    @Flag(help: "Print them as JSON.")
    var json = false

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        let daemon = try await common.run { try await client.daemonVersion() }
        if json {
            print(jsonText(.object(["tokenctl": .string(Release.version), "tokend": .string(daemon)])))
        } else {
            print("tokenctl \(Release.version)\ntokend \(daemon) (at \(client.socket))")
        }
    }
}
