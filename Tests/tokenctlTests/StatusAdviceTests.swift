import Foundation
import Testing
import TokendClient

@testable import TokenctlProgram

/// What `tokenctl status` says of a session, made from its status alone.
@Suite struct StatusAdviceTests {
    let now = 1_780_000_000  // 2026-05-28 20:26:40 UTC
    let utc = Zone.utc

    func status(_ state: String, session: String = "default") -> SessionStatus {
        SessionStatus(session: session, state: state, generation: 3, refreshes: 4, coalesced: 17, failures: 0)
    }

    @Test func aRefusedRefreshTokenAsksForALoginAndNamesTheCommand() {
        var refused = status("loginRequired")
        refused.lastError = "token endpoint refused the refresh (invalid_grant: Invalid grant)"
        refused.refreshes = 0
        let advice = StatusAdvice(refused, now: now, zone: utc)
        #expect(advice.severity == .broken)
        #expect(advice.headline == "login required — token endpoint refused the refresh (invalid_grant: Invalid grant)")
        #expect(advice.command == "tokenctl login --device")
        #expect(advice.text.hasPrefix(advice.headline + "\n  Run: tokenctl login --device\n"))
        #expect(!advice.text.contains("refreshes here"), "a session never refreshed here has no counts to show")
    }

    @Test func aBrokenStateSaysSinceWhen() {
        var refused = status("loginRequired")
        refused.lastError = "the provider refused the refresh token (invalid_grant)"
        refused.stateSince = now - 1_800  // 19:56:40 UTC
        #expect(StatusAdvice(refused, now: now, zone: utc).headline
            == "login required since 19:56 — the provider refused the refresh token (invalid_grant)")
        var failing = status("backingOff")
        failing.stateSince = now - 86_400 - 60
        #expect(StatusAdvice(failing, now: now, zone: utc).headline == "refreshing fails since 2026-05-27 20:25")
        var active = status("active")
        active.stateSince = now - 60
        #expect(!StatusAdvice(active, now: now, zone: utc).headline.contains("since"))
    }

    @Test func aSessionOtherThanDefaultIsNamedInTheCommand() {
        let advice = StatusAdvice(status("loggedOut", session: "ci"), now: now, zone: utc)
        #expect(advice.headline == "logged out")
        #expect(advice.command == "tokenctl login --session ci --device")
    }

    @Test func anActiveSessionSaysUntilWhenItsTokenIsValid() {
        var active = status("active")
        active.expiresAt = now + 600
        active.lastRefreshAt = now - 60
        active.nextRefreshAt = now + 540
        let advice = StatusAdvice(active, now: now, zone: utc)
        #expect(advice.severity == .fine && advice.command == nil)
        #expect(advice.headline == "active — token valid until 20:36 (in 10 min)")
        #expect(advice.details.contains(
            "last refresh 20:25 (60 s ago), next 20:35 (in 9 min), 4 refreshes here, 17 callers served by one already under way"))
    }

    @Test func backingOffWithAValidTokenNeedsALookNotALogin() {
        var failing = status("backingOff")
        failing.expiresAt = now + 300
        failing.failures = 3
        failing.nextRefreshAt = now + 8
        failing.lastError = "token endpoint answered HTTP 503"
        let advice = StatusAdvice(failing, now: now, zone: utc)
        #expect(advice.severity == .attention)
        #expect(advice.headline == "refreshing fails — token endpoint answered HTTP 503")
        #expect(advice.details.contains("3 failed attempts; tokend tries again at 20:26 (in 8 s) by itself"))
        #expect(advice.command == "tokenctl doctor")
        failing.expiresAt = now - 1
        #expect(StatusAdvice(failing, now: now, zone: utc).severity == .broken)
    }

    @Test func anUnavailableFleetStoreIsSaid() {
        var shared = status("active")
        shared.expiresAt = now + 600
        shared.store = "unavailable: connection refused"
        let advice = StatusAdvice(shared, now: now, zone: utc)
        #expect(advice.severity == .attention)
        #expect(advice.details.contains("fleet store unavailable: connection refused; tokend reconnects by itself"))
    }

    @Test func timesAreRelativeAndDatedWhenNotToday() {
        #expect(StatusAdvice.relative(40) == "in 40 s")
        #expect(StatusAdvice.relative(-300) == "5 min ago")
        #expect(StatusAdvice.relative(7200) == "in 2 h")
        #expect(StatusAdvice.relative(0) == "now")
        #expect(StatusAdvice.time(now + 86_400, now: now, zone: utc) == "2026-05-29 20:26 (in 24 h)")
    }

    /// Every human time (status, sessions, token refresh, shares, login) is humanTime's; at 23:59 on
    /// 31 December a time two minutes on is in another day and year, and says so.
    @Test func humanTimesTurnTheDayAndTheYear() {
        let newYearsEve = 1_798_761_540  // 2026-12-31 23:59:00 UTC
        #expect(humanTime(newYearsEve + 120, now: newYearsEve, zone: utc) == "2027-01-01 00:01 (in 2 min)")
        #expect(humanTime(newYearsEve + 30, now: newYearsEve, zone: utc) == "23:59 (in 30 s)")
        #expect(humanTime(newYearsEve - 86_400, now: newYearsEve, zone: utc) == "2026-12-30 23:59 (24 h ago)")
        let berlin = Zone(TimeZone(identifier: "Europe/Berlin")!)
        // Local time: in Berlin that moment is already 00:59 of the new year, today there.
        #expect(humanTime(newYearsEve, now: newYearsEve, zone: berlin) == "00:59 (now)")
        #expect(humanTime(newYearsEve - 3600, now: newYearsEve, zone: berlin) == "2026-12-31 23:59 (60 min ago)")
    }

    @Test func whoMayHaveEachResourceAndWhetherPagesMaySaySo() {
        var apis = status("active")
        apis.resources = ["https://admin.example.com/", "https://mail.example.com/"]
        apis.strategy = "shared-audience"
        apis.strategyReason = "one token for all"
        apis.resourceAccess = [.init(resource: "https://admin.example.com/", users: ["alice"], groups: ["ops"])]
        apis.webOrigins = ["https://app.example.com"]
        apis.pageTokens = "none"
        apis.pageTokensReason = "every token covers the admin API"
        let text = StatusAdvice(apis, now: now, zone: utc).text
        #expect(text.contains("tokens covering https://admin.example.com/: only user alice, group ops (resource-access)"))
        #expect(text.contains("pages: none — every token covers the admin API"))
        #expect(text.contains("strategy shared-audience: one token for all"))
    }
}
