#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

/// What a session's status means for a person and what to do about it, said
/// only from what the status holds.
struct StatusAdvice: Equatable, Sendable {
    enum Severity: Equatable, Sendable {
        /// Tokens are served; nothing to do.
        case fine
        /// Tokens are served, but something needs a look.
        case attention
        /// No token can be had until someone acts (or the provider or store comes back).
        case broken
    }

    var severity: Severity
    /// "login required — the token endpoint refused …"
    var headline: String
    var details: [String] = []
    /// The command that fixes it, when there is one.
    var command: String?

    /// The ways to log in that a session's endpoints allow (`flows`, from its
    /// status; nil while tokend does not know them yet: both), the first the command.
    static func logins(_ flows: [String]?, flag: String) -> [String] {
        let flows = flows ?? ["device", "browser"]
        switch (flows.contains("device"), flows.contains("browser")) {
        case (true, true): return ["tokenctl login\(flag) --device", "or, on a machine with a browser: tokenctl login\(flag) --browser"]
        case (true, false): return ["tokenctl login\(flag) --device"]
        case (false, true): return ["tokenctl login\(flag) --browser"]
        case (false, false):
            return ["tokenctl login\(flag) --refresh-token-file FILE",
                    "the session has neither a device authorization nor an authorization endpoint: only a refresh token you hold logs it in"]
        }
    }

    /// `now` and `zone` decide how times read ("10:42", "in 5 min").
    init(_ status: SessionStatus, now: Int, zone: Zone = .local) {
        let time = { (unix: Int) in StatusAdvice.time(unix, now: now, zone: zone) }
        let flag = status.session == "default" ? "" : " --session \(status.session)"
        let tokenValid = status.expiresAt.map { $0 > now } ?? false
        let reason = status.lastError.map { " — \($0)" } ?? ""
        // When the session entered its state (login required, logged out, backing off).
        let since = status.stateSince.map { " since \(StatusAdvice.clock($0, now: now, zone: zone))" } ?? ""
        severity = .fine
        switch status.state {
        case "loginRequired", "loggedOut":
            severity = .broken
            headline = (status.state == "loggedOut" ? "logged out" : "login required") + since + reason
            let ways = StatusAdvice.logins(status.loginFlows, flag: flag)
            command = ways.first
            details += ways.dropFirst()
        case "backingOff":
            severity = tokenValid ? .attention : .broken
            headline = "refreshing fails" + since + reason
            var retry = "\(status.failures) failed attempt\(status.failures == 1 ? "" : "s")"
            if let next = status.nextRefreshAt { retry += "; tokend tries again at \(time(next)) by itself" }
            details.append(retry)
            details.append(
                tokenValid
                    ? "the current token is still served until \(time(status.expiresAt!))"
                    : "no valid token meanwhile: callers get \"token endpoint unavailable\" (exit 4)")
            command = "tokenctl doctor\(flag)"
        case "refreshing":
            headline = "refreshing now"
        default:
            if let expiresAt = status.expiresAt {
                headline = (status.state == "active" ? "active" : status.state)
                    + (tokenValid ? " — token valid until \(time(expiresAt))"
                        : " — token expired at \(time(expiresAt)); tokend refreshes when next asked")
            } else {
                headline = status.state
            }
            if let note = status.lastError { details.append("note: \(note)") }
        }
        if let store = status.store, store.hasPrefix("unavailable") {
            details.append("fleet store \(store); tokend reconnects by itself")
            if severity == .fine { severity = .attention }
            command = command ?? "tokenctl doctor\(flag)"
        }
        if let owner = status.owner {
            details.append("\(owner)'s own session: only \(owner) may use it, log it in, share or remove it (tokenctl remove)")
        }
        if let subject = status.subject {
            let name = [status.username, status.email.map { "<\($0)>" }].compactMap { $0 }.joined(separator: " ")
            details.append("logged in as \(name.isEmpty ? "subject \(subject)" : name)")
        }
        if status.refreshes > 0 || status.lastRefreshAt != nil {
            var refreshes: [String] = []
            if let last = status.lastRefreshAt { refreshes.append("last refresh \(time(last))") }
            if let next = status.nextRefreshAt, status.state == "active" { refreshes.append("next \(time(next))") }
            refreshes.append(
                "\(status.refreshes) refresh\(status.refreshes == 1 ? "" : "es") here, \(status.coalesced) caller\(status.coalesced == 1 ? "" : "s") served by one already under way")
            details.append(refreshes.joined(separator: ", "))
        }
        if status.pendingLogins > 0 {
            details.append("\(status.pendingLogins) login\(status.pendingLogins == 1 ? "" : "s") waiting for approval")
        }
        if let dpop = status.dpop {
            let key = dpop.thumbprint.map { "DPoP key \($0) in the \(dpop.keyStorage)" } ?? "DPoP: the next login makes a key in the \(dpop.keyStorage)"
            details.append(dpop.binding == "none" ? key : "\(key), binding \(dpop.binding)")
            if let problem = dpop.problem { details.append("DPoP: \(problem)") }
        }
        if !status.resources.isEmpty {
            details.append("resources \(status.resources.joined(separator: " ")), strategy \(status.strategy): \(status.strategyReason)")
            for access in status.resourceAccess {
                let who = (access.users.map { "user \($0)" } + access.groups.map { "group \($0)" }).joined(separator: ", ")
                details.append("tokens covering \(access.resource): only \(who.isEmpty ? "root and tokend's user" : who) (resource-access)")
            }
        }
        if !status.webOrigins.isEmpty {
            details.append("pages: \(status.pageTokens) — \(status.pageTokensReason)")
        }
    }

    /// "10:42 (in 5 min)", with the date when it is not today.
    static func time(_ unix: Int, now: Int, zone: Zone) -> String {
        "\(clock(unix, now: now, zone: zone)) (\(relative(unix - now)))"
    }

    /// "10:42", or "2026-05-28 10:42" when it is not today.
    static func clock(_ unix: Int, now: Int, zone: Zone) -> String {
        let clock = WallClock(unix, in: zone)
        return clock.isSameDay(as: WallClock(now, in: zone)) ? clock.time : "\(clock.date) \(clock.time)"
    }

    /// "in 40 s", "5 min ago", "in 2 h", "now".
    static func relative(_ seconds: Int) -> String {
        if seconds == 0 { return "now" }
        let size = abs(seconds)
        let amount = size < 90 ? "\(size) s" : size < 90 * 60 ? "\((size + 30) / 60) min" : "\((size + 1800) / 3600) h"
        return seconds >= 0 ? "in \(amount)" : "\(amount) ago"
    }

    /// The session's block of `tokenctl status`: what is happening, what to do, then the rest.
    var text: String {
        let lines = (command.map { ["Run: \($0)"] } ?? []) + details
        return ([headline] + lines.map { "  \($0)" }).joined(separator: "\n")
    }
}
