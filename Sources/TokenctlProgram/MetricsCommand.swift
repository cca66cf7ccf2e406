import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import Glibc

struct MetricsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics", abstract: "Print tokend's metrics (OpenMetrics text).")
    @OptionGroup var connection: Connection

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        print(try await common.run { try await client.metrics() }, terminator: "")
    }
}
