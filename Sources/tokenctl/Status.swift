import ArgumentParser
import Foundation
import TokendClient

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Say what each session is doing and what to do about it.",
        discussion: """
            Without --session: every session this user may read. --json prints one session's status \
            (the default session unless --session names one) as tokend gives it.
            """)
    @OptionGroup var common: Common
    @Flag(help: "Print the session's status as JSON.")
    var json = false

    func run() async throws {
        let client = try await common.connect()
        if json {
            let status = try await common.run { try await client.status(session: common.session) }
            print(jsonText(status.json))
            return
        }
        let statuses: [SessionStatus]
        if let session = common.session {
            statuses = [try await common.run { try await client.status(session: session) }]
        } else {
            statuses = try await common.run { try await client.sessions() }
        }
        if statuses.isEmpty {
            print("No session this user may read: `tokenctl doctor` checks this user's access.")
            return
        }
        let now = Int(Date().timeIntervalSince1970)
        print(statuses.map { "\($0.session): \(StatusAdvice($0, now: now).text)" }.joined(separator: "\n\n"))
    }
}
