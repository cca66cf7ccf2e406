import CookieJar
import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Synchronization
import TestSupport
import Testing
@testable import Broker

/// What a subscriber saw, and when a caller got its token, in one order.
final class Timeline: Sendable {
    private let entries = Mutex<[String]>([])
    func append(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

@Suite struct CookieTests {
    let origin = CookieRequest(string: "https://auth.example.com/oauth/token")!

    @Test func endpointCookiesAreKeptAndSentBack() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["sid=1; Path=/; Max-Age=3600", "csrf=a"], ["csrf=b"])
        try await h.expiredSession()
        _ = try await h.session.refresh(staleGeneration: nil)
        _ = try await h.session.refresh(staleGeneration: nil)
        _ = try await h.session.refresh(staleGeneration: nil)
        #expect(h.endpoint.seenCookieHeaders == ["", "csrf=a; sid=1", "csrf=b; sid=1"])
        let (cookies, version) = await h.session.cookies(for: origin)
        #expect(cookies.map(\.value) == ["b", "1"] && version == 3)
    }

    @Test func subscribersGetCookieChangesThenRefreshedBeforeTheCaller() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["sid=1; Path=/", "old=x; Path=/; Max-Age=0"])
        try await h.expiredSession()
        let fanOut = TestFanOut(holdsDelivery: true)
        let events = await fanOut.subscribe(h.session)
        let timeline = Timeline()
        let consumer = Task {
            for await event in events {
                // A slow client: the caller must still come after it.
                try? await Task.sleep(for: .milliseconds(20))
                timeline.append("\(event.kind.rawValue):\(event.changes.map { "\($0.action.rawValue) \($0.cookie.name)" })")
                if event.kind == .refreshed { fanOut.deliver() }
            }
        }
        _ = try await h.session.getToken(minValidSeconds: nil)
        timeline.append("token")
        #expect(timeline.all == ["cookies:[\"set sid\"]", "refreshed:[]", "token"])
        consumer.cancel()
    }

    @Test func aStuckSubscriberDelaysNobodyBeyondTheDeadline() async throws {
        let h = try Harness()
        try await h.expiredSession()
        // A subscriber that never takes its events: the caller waits out the deadline, no more.
        let fanOut = TestFanOut(holdsDelivery: true)
        _ = await fanOut.subscribe(h.session)
        let started = ContinuousClock.now
        _ = try await h.session.getToken(minValidSeconds: nil)
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    @Test func cookiesExpireOnTheirOwnAndOnDisk() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["short=1; Max-Age=100", "long=2; Max-Age=1000"])
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        var iterator = await TestFanOut().subscribe(h.session).makeAsyncIterator()
        h.clock.advance(to: h.clock.now() + 100)
        let event = await iterator.next()
        #expect(event?.kind == .cookies && event?.changes.map(\.action) == [.delete])
        #expect(event?.changes.first?.cookie.name == "short")
        try await eventually { (try? h.file.load())?.cookies.count == 1 }
        #expect(try h.file.load()?.cookies.map(\.name) == ["long"])
    }

    @Test func cookiesSurviveRestartAndLogoutDeletesThemAll() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["persistent=1; Max-Age=3600", "session=2"])
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        let restarted = SessionActor(
            name: "default", policy: RefreshPolicy(), endpoint: h.endpoint, file: h.file, clock: h.clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        await restarted.start()
        #expect(await restarted.cookies(for: origin).cookies.map(\.name) == ["persistent", "session"])
        var iterator = await TestFanOut().subscribe(restarted).makeAsyncIterator()
        try await restarted.logout(revoke: false)
        let deletions = await iterator.next()
        #expect(deletions?.kind == .cookies && deletions?.changes.map(\.action) == [.delete, .delete])
        #expect(await iterator.next()?.kind == .loggedOut)
        #expect(try h.file.load()?.cookies.isEmpty == true)
    }

    @Test func rejectedGrantWipesTheJarButAppliesItsAnswerFirst() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["a=1"], ["b=2"])
        h.endpoint.script(.token(expiresIn: 600, rotate: true), .error(.rejected(code: "invalid_grant", reason: "no")))
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        var iterator = await TestFanOut().subscribe(h.session).makeAsyncIterator()
        _ = try? await h.session.refresh(staleGeneration: nil)
        let cookies = await iterator.next()
        #expect(cookies?.changes.map { "\($0.action.rawValue) \($0.cookie.name)" } == ["set b", "delete a", "delete b"])
        #expect(await iterator.next()?.kind == .loginRequired)
    }

    @Test func failedAnswersStillSetCookies() async throws {
        let h = try Harness()
        h.endpoint.scriptCookies(["lb=node2"])
        h.endpoint.script(.error(.transient("HTTP 503")))
        try await h.expiredSession()
        _ = try? await h.session.getToken(minValidSeconds: nil)
        #expect(await h.session.cookies(for: origin).cookies.map(\.value) == ["node2"])
        #expect(try h.file.load()?.cookies.count == 1)
    }

    @Test func importReportsAppliedAndRejected() async throws {
        let h = try Harness()
        let page = CookieRequest(string: "https://app.example.com/home")!
        await #expect(throws: BrokerError.self) { try await h.session.importCookies(from: page, setCookie: ["a=1"]) }
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        let result = try await h.session.importCookies(
            from: page, setCookie: ["a=1; Path=/", "b=2; Domain=other.com", "junk"])
        #expect(result.applied == 1 && result.version == 1)
        #expect(result.rejected == [
            "setCookie[1] (b): Domain does not match the request host",
            "setCookie[2]: not a cookie (empty name and value, or a control character)",
        ])
        #expect(try h.file.load()?.cookies.map(\.name) == ["a"])
    }

    @Test func reconnectingSubscriberGetsWhatItMissed() async throws {
        let h = try Harness()
        try await h.expiredSession()
        _ = try await h.session.getToken(minValidSeconds: nil)
        let page = CookieRequest(string: "https://app.example.com/")!
        _ = try await h.session.importCookies(from: page, setCookie: ["a=1", "b=2"])
        _ = try await h.session.importCookies(from: page, setCookie: ["a=; Max-Age=0"])
        let fanOut = TestFanOut()
        var iterator = await fanOut.subscribe(h.session, sinceVersion: 1).makeAsyncIterator()
        let missed = await iterator.next()
        #expect(missed?.snapshot == false && missed?.changes.map(\.version) == [2, 3])
        var fresh = await fanOut.subscribe(h.session, sinceVersion: 3).makeAsyncIterator()
        _ = try await h.session.importCookies(from: page, setCookie: ["c=3"])
        let live = await fresh.next()
        #expect(live?.changes.map(\.cookie.name) == ["c"], "nothing missed: live events only \(String(describing: live))")
        var stale = await fanOut.subscribe(h.session, sinceVersion: 77).makeAsyncIterator()
        let snapshot = await stale.next()
        #expect(snapshot?.snapshot == true && snapshot?.changes.map(\.cookie.name) == ["b", "c"])
    }
}
