import Foundation
import OAuth
import Secrets
import TestSupport
import Testing
@testable import Broker

/// A refresh refused by a bare 400 or 401 (no OAuth error code) is confirmed
/// once, after the first backoff step, then the session needs a login; 5xx
/// and 429 stay transient however often they come.
@Suite struct RefusalTests {
    /// What the token endpoint client makes of an answer.
    static func answer(_ status: Int, _ body: String, retryAfter: String? = nil) -> FakeEndpoint.Answer {
        switch TokenResponse.classify(status: status, retryAfterHeader: retryAfter, body: Array(body.utf8)) {
        case .failure(let error): .error(error)
        case .success: .token(expiresIn: 600, rotate: true)
        }
    }

    @Test(arguments: [(400, "", "HTTP 400 with an empty body"), (401, "<html><h1>Unauthorized</h1></html>", "Unauthorized")])
    func bareRefusalIsConfirmedOnceThenRequiresLogin(_ status: Int, _ body: String, _ said: String) async throws {
        let h = try Harness()
        h.endpoint.script(Self.answer(status, body), Self.answer(status, body))
        let events = await TestFanOut().subscribe(h.session)
        try await h.expiredSession()
        try await eventually { await h.session.status().state == "backingOff" }
        #expect(h.endpoint.calls == 1)
        #expect(await h.session.status().lastError?.contains(said) == true)
        let error = await #expect(throws: BrokerError.self) { try await h.session.getToken(minValidSeconds: nil) }
        #expect(error?.code == .upstreamUnavailable)
        // The confirming retry comes after the first backoff step (1 s × 1.0 at jitter 0.5).
        h.clock.advance(to: h.clock.now() + 1)
        try await eventually { await h.session.status().state == "loginRequired" }
        #expect(h.endpoint.calls == 2)
        let reason = await h.session.status().lastError ?? ""
        #expect(reason.contains("HTTP \(status)") && reason.contains(said), "\(reason)")
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next()?.kind == .loginRequired)
        #expect(try h.file.load()?.refreshToken == nil)
        await #expect(throws: BrokerError.self) { try await h.session.refresh(staleGeneration: 3) }
        #expect(h.endpoint.calls == 2)
    }

    @Test func aRefusalTheNextAttemptDoesNotRepeatChangesNothing() async throws {
        let h = try Harness()
        h.endpoint.script(Self.answer(400, ""), .token(expiresIn: 600, rotate: true))
        try await h.expiredSession()
        try await eventually { await h.session.status().state == "backingOff" }
        h.clock.advance(to: h.clock.now() + 1)
        try await eventually { await h.session.status().generation == 4 }
        #expect(await h.session.status().state == "active")
        // The next bare refusal is a first one again.
        h.endpoint.script(Self.answer(400, ""))
        await #expect(throws: BrokerError.self) { try await h.session.refresh(staleGeneration: 4) }
        #expect(await h.session.status().state == "backingOff")
    }

    @Test(arguments: [(500, "<html>oops</html>", nil), (502, "", nil), (429, "", "1")])
    func serverTroubleStaysTransient(_ status: Int, _ body: String, _ retryAfter: String?) async throws {
        let h = try Harness()
        for _ in 0..<4 { h.endpoint.script(Self.answer(status, body, retryAfter: retryAfter)) }
        try await h.expiredSession()
        for attempt in 1...4 {
            try await eventually { h.endpoint.calls == attempt }
            try await eventually {
                let status = await h.session.status()
                return status.failures == attempt && status.state == "backingOff"
            }
            h.clock.advance(to: h.clock.now() + 60)
        }
        try await eventually { await h.session.status().generation == 4 }
        #expect(await h.session.status().state == "active")
    }

    @Test(arguments: ["invalid_client", "unauthorized_client"])
    func aRefusedClientKeepsTheGrantAndSaysWhatToCheck(_ code: String) async throws {
        let h = try Harness()
        h.endpoint.script(Self.answer(401, #"{"error":"\#(code)","error_description":"assertion expired"}"#))
        try await h.expiredSession()
        try await eventually { await h.session.status().state == "backingOff" }
        let status = await h.session.status()
        let reason = status.lastError ?? ""
        #expect(reason.contains(code) && reason.contains("client-secret-file") && reason.contains("host clock"), "\(reason)")
        #expect(status.nextRefreshAt == Int(h.clock.now()) + SessionActor.clientRefusalDelay)
        #expect(try h.file.load()?.refreshToken == Secret("refresh-0"))
        // Nothing is asked before the long delay; then the same refresh token works again.
        h.clock.advance(to: h.clock.now() + 60)
        try await Task.sleep(for: .milliseconds(20))
        #expect(h.endpoint.calls == 1)
        h.clock.advance(to: h.clock.now() + Double(SessionActor.clientRefusalDelay))
        try await eventually { await h.session.status().generation == 4 }
        #expect(h.endpoint.seenRefreshTokens == ["refresh-0", "refresh-0"])
        #expect(await h.session.status().state == "active")
    }

    @Test func aRefusedClientIsNeverConfirmedIntoALogin() async throws {
        let h = try Harness()
        let refused = Self.answer(400, #"{"error":"invalid_client"}"#)
        h.endpoint.script(Self.answer(400, ""), refused, refused)
        try await h.expiredSession()
        for attempt in 1...3 {
            try await eventually {
                let state = await h.session.status().state
                return h.endpoint.calls == attempt && state == "backingOff"
            }
            h.clock.advance(to: h.clock.now() + Double(SessionActor.clientRefusalDelay))
        }
        try await eventually { await h.session.status().generation == 4 }
        #expect(try h.file.load()?.refreshToken == Secret("refresh-4"))
    }

    @Test func refusalsAlternatingWithServerErrorsStillBackOff() async throws {
        let h = try Harness()
        h.endpoint.script(
            Self.answer(400, ""), Self.answer(500, ""), Self.answer(400, ""), Self.answer(500, ""), Self.answer(400, ""))
        try await h.expiredSession()
        // At jitter 0.5 each step is 1, 2, 4, 8 s: a refusal does not start the steps again.
        for (attempt, step) in [(1, 1), (2, 2), (3, 4), (4, 8)] {
            try await eventually {
                let state = await h.session.status().state
                return h.endpoint.calls == attempt && state == "backingOff"
            }
            let now = Int(h.clock.now())
            #expect(await h.session.status().nextRefreshAt == now + step, "after attempt \(attempt)")
            h.clock.advance(to: h.clock.now() + Double(step))
        }
        try await eventually {
            let state = await h.session.status().state
            return h.endpoint.calls == 5 && state == "backingOff"
        }
    }
}
