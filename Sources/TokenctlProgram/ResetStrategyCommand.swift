import ArgumentParser
import TokendClient

/// An admin's way out when tokend learnt the wrong thing about a provider:
/// the strategy and the grant's resources are learnt again at the next refresh.
struct ResetStrategyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset-strategy",
        abstract: "Forget what tokend learnt of the provider (refresh strategy, the grant's resources); admin only.")
    @OptionGroup var common: Common

    func run() async throws {
        let client = try await common.connect()
        let status = try await common.run { try await client.resetStrategy(session: common.session) }
        print("strategy \(status.strategy): \(status.strategyReason)")
    }
}
