import ArgumentParser
import Foundation
import TokendClient
import Glibc

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show a session's state.")
    @OptionGroup var common: Common
    @Flag(help: "Print the status as JSON.")
    var json = false

    func run() async throws {
        let client = try await common.connect()
        let status = try await common.run { try await client.status(session: common.session) }
        if json {
            print(jsonText(status.json))
        } else {
            printStatus(status)
        }
    }
}
