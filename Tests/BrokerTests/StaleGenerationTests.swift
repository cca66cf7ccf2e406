import Foundation
import OAuth
import TestSupport
import Testing
@testable import Broker

/// Refresh(staleGeneration: g) means "token g was refused": it never answers with g or older.
@Suite struct StaleGenerationTests {
    @Test func namedGenerationDuringBackoffGetsUpstreamUnavailableNotTheSameToken() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let good = try await h.session.getToken(minValidSeconds: nil)
        h.endpoint.script(.error(.transient("token endpoint answered HTTP 503", retryAfter: 120)))
        _ = try await h.session.refresh(staleGeneration: nil)
        #expect(await h.session.status().state == "backingOff")
        let error = await #expect(throws: BrokerError.self) {
            try await h.session.refresh(staleGeneration: good.generation)
        }
        #expect(error?.code == .upstreamUnavailable)
        #expect(error?.retryAfter == 120)
        #expect(error?.reason.contains("503") == true)
        #expect(h.endpoint.calls == 2, "backing off: no upstream call")
        // Callers that name no generation are still served the valid token.
        #expect(try await h.session.getToken(minValidSeconds: nil) == good)
    }

    @Test func namedGenerationWhoseRefreshFailsGetsTheReason() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let good = try await h.session.getToken(minValidSeconds: nil)
        h.endpoint.script(.error(.transient("token endpoint answered HTTP 500", retryAfter: nil)))
        let error = await #expect(throws: BrokerError.self) {
            try await h.session.refresh(staleGeneration: good.generation)
        }
        #expect(error?.code == .upstreamUnavailable)
        #expect(error?.retryAfter == 1)
        #expect(h.endpoint.calls == 2)
    }

    @Test func aGenerationNeverHandedOutCountsAsTheCurrentOne() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let good = try await h.session.getToken(minValidSeconds: nil)
        let refreshed = try await h.session.refresh(staleGeneration: 1 << 53)
        #expect(refreshed.generation == good.generation + 1)
    }

    /// A refusal waiting for confirmation belongs to the token it refused: a
    /// login in between makes the next bare refusal a first one again.
    @Test func aRefusalToConfirmDoesNotOutliveItsGeneration() async throws {
        let h = try Harness()
        h.endpoint.script(RefusalTests.answer(400, ""), RefusalTests.answer(400, ""))
        try await h.expiredSession()
        try await eventually { await h.session.status().state == "backingOff" }
        let ticket = try await h.session.beginLogin(flow: .browser, redirectURI: "http://127.0.0.1:4000/cb", owner: nil)
        let authorizationURL = try #require(ticket.authorizationURL)
        let url = try #require(URLComponents(string: authorizationURL))
        let state = try #require(url.queryItems?.first { $0.name == "state" }?.value)
        let status = try await h.session.finishLogin(
            id: ticket.id, callbackURL: "http://127.0.0.1:4000/cb?code=c1&state=\(state)", caller: nil)
        #expect(status.state == "active" && status.generation == 4)
        let error = await #expect(throws: BrokerError.self) { try await h.session.refresh(staleGeneration: 4) }
        #expect(error?.code == .upstreamUnavailable)
        #expect(h.endpoint.calls == 2)
        #expect(await h.session.status().state == "backingOff")
        #expect(try h.file.load()?.refreshToken != nil)
    }
}
