import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Say what each session is doing and what to do about it.",
        discussion: """
            Without --session: every session this user may read; with it, that session. --json prints \
            each one's status as tokend gives it (times as RFC 3339), one JSON object per line. Exits 2 when a session it             shows needs a login.
            """)
    @OptionGroup var scope: EverySession
    var common: Common { scope.common }
    @Flag(help: "Print each session's status as JSON, one object per line.")
    var json = false

    func run() async throws {
        let common = common
        let json = json
        guard let (text, loginRequired) = try await answered(within: replySeconds, {
            try await Self.text(common: common, json: json)
        })
        else { throw common.wedged() }
        print(text)
        // A script asks `tokenctl status` whether a session needs a person: exit 2 says so.
        if loginRequired { throw ExitCode(Exit.loginRequired) }
    }

    /// The text, and whether a session it covers needs a login.
    static func text(common: Common, json: Bool) async throws -> (String, Bool) {
        let statuses = try await Self.statuses(common: common)
        return (Self.text(statuses, json: json), statuses.contains { $0.state == "loginRequired" })
    }

    static func statuses(common: Common) async throws -> [SessionStatus] {
        let client = try await common.connect()
        let statuses: [SessionStatus]
        if let session = common.session {
            statuses = [try await common.run { try await client.status(session: session) }]
        } else {
            statuses = try await common.run { try await client.sessions() }
        }
        return statuses
    }

    static func text(_ statuses: [SessionStatus], json: Bool) -> String {
        if json { return statuses.map { jsonText(cliJSON($0.json)) }.joined(separator: "\n") }
        if statuses.isEmpty {
            return "No session this user may read: `tokenctl doctor` checks this user's access."
        }
        let now = Int(Date().timeIntervalSince1970)
        return statuses.map { status in
            (["\(status.session): \(StatusAdvice(status, now: now).text)"] + fleetLines(status).map { "  \($0)" })
                .joined(separator: "\n")
        }.joined(separator: "\n\n")
    }

    /// A fleet session's store as this host sees it: how it learns of other
    /// hosts' writes, how old its copy is, the store's round trips, the lease.
    static func fleetLines(_ status: SessionStatus) -> [String] {
        guard let fleet = status.fleet else { return [] }
        let every = "a read every \(fleet.pollInterval) s"
        let following = switch fleet.following {
        case "listening": "notifications (listen=on) and \(every)"
        case "notificationsLost":
            "\(every) only: listen=on, but no notification arrives (a pooler in transaction mode?)"
        default: every
        }
        let age = fleet.copyAge.map { "read \(StatusAdvice.relative(-Int($0.rounded())))" } ?? "not read yet"
        let trip = fleet.lastRoundTrip.map { cFormat(", last round trip %.1f ms", $0 * 1000) } ?? ""
        let lease: String
        if let held = fleet.lease {
            let who = held.heldHere ? "this host" : held.holder
            lease = "lease held by \(who) (epoch \(held.epoch)), \(Int(held.remaining.rounded(.up))) s left"
                + (held.heldHere ? "" : " when last read")
        } else {
            lease = "lease free when last read"
        }
        return [
            "fleet host \(status.hostId ?? "?"): learns of other hosts' writes by \(following); its copy \(age)",
            "\(lease); \(fleet.statements) statements to the store\(trip), \(fleet.connects) connections opened",
        ]
    }
}
