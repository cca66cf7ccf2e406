import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Synchronization
import Testing
@testable import Broker

/// What providers leave out of a refresh answer (RFC 6749 §6, OpenID Connect
/// Core §12.2): no `id_token`, no new `refresh_token`, a narrower `scope`.
@Suite struct RefreshResponseTests {
    /// A token endpoint answering each refresh with the next scripted response.
    final class ScriptedEndpoint: TokenEndpoint {
        let responses: Mutex<[TokenResponse]>
        let seen = Mutex<[String]>([])
        let tokenURL: URL? = URL(string: "https://id.example.com/token")

        init(_ responses: [TokenResponse]) { self.responses = Mutex(responses) }

        func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
            seen.withLock { $0.append(refreshToken.reveal()) }
            return RefreshAnswer(result: .success(responses.withLock { $0.removeFirst() }))
        }

        func revoke(token: Secret) async throws(TokenEndpointError) {}
    }

    let clock = TestClock()

    func session(_ endpoint: ScriptedEndpoint) async throws -> (SessionActor, SessionFile) {
        let directory = NSTemporaryDirectory() + "tokend-refresh-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        try file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("old"), tokenType: "Bearer",
                scope: "openid read write", expiresAt: Int(clock.now()) - 1, expirySource: "expires_in", generation: 3,
                lastRefreshAt: Int(clock.now()) - 601, subject: "42", username: "alice", email: "a@example.test"))
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: endpoint, file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 })
        await session.start()
        return (session, file)
    }

    func response(_ access: String, refresh: String?, scope: String?, idToken: String? = nil) -> TokenResponse {
        TokenResponse(
            accessToken: Secret(access), tokenType: "Bearer", expiresIn: 600, refreshToken: refresh.map(Secret.init),
            scope: scope, idToken: idToken.map(Secret.init))
    }

    @Test func withoutARefreshTokenTheOldOneIsKeptAndUsedAgain() async throws {
        let endpoint = ScriptedEndpoint([
            response("a1", refresh: nil, scope: nil), response("a2", refresh: nil, scope: nil),
        ])
        let (session, file) = try await session(endpoint)
        #expect(try await session.getToken(minValidSeconds: nil).accessToken.reveal() == "a1")
        #expect(try file.load()?.refreshToken?.reveal() == "refresh-0")
        let second = try await session.refresh(staleGeneration: nil)
        #expect(second.accessToken.reveal() == "a2" && second.generation == 5)
        #expect(endpoint.seen.withLock { $0 } == ["refresh-0", "refresh-0"])
    }

    @Test func withoutAnIDTokenWhoLoggedInStays() async throws {
        let endpoint = ScriptedEndpoint([response("a1", refresh: "refresh-1", scope: "openid read write")])
        let (session, file) = try await session(endpoint)
        let token = try await session.getToken(minValidSeconds: nil)
        #expect(token.accessToken.reveal() == "a1" && token.generation == 4)
        let status = await session.status()
        #expect(status.state == "active" && status.subject == "42")
        #expect(try file.load()?.username == "alice")
        #expect(try file.load()?.refreshToken?.reveal() == "refresh-1")
    }

    @Test func aNarrowerScopeIsWhatTheTokenCarries() async throws {
        let endpoint = ScriptedEndpoint([
            response("a1", refresh: "refresh-1", scope: "openid read"),
            response("a2", refresh: "refresh-2", scope: nil),
        ])
        let (session, file) = try await session(endpoint)
        #expect(try await session.getToken(minValidSeconds: nil).scope == "openid read")
        #expect(try file.load()?.scope == "openid read")
        // No scope in the answer: RFC 6749 §5.1 says it is the one granted before, not the one first asked for.
        #expect(try await session.refresh(staleGeneration: nil).scope == "openid read")
    }
}
