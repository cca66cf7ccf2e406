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
        let common = common
        let json = json
        guard let text = try await answered(within: replySeconds, { try await Self.text(common: common, json: json) })
        else { throw common.wedged() }
        print(text)
    }

    static func text(common: Common, json: Bool) async throws -> String {
        let client = try await common.connect()
        if json {
            let status = try await common.run { try await client.status(session: common.session) }
            return jsonText(status.json)
        }
        let statuses: [SessionStatus]
        if let session = common.session {
            statuses = [try await common.run { try await client.status(session: session) }]
        } else {
            statuses = try await common.run { try await client.sessions() }
        }
        if statuses.isEmpty {
            return "No session this user may read: `tokenctl doctor` checks this user's access."
        }
        let now = Int(Date().timeIntervalSince1970)
        return statuses.map { "\($0.session): \(StatusAdvice($0, now: now).text)" }.joined(separator: "\n\n")
    }
}
