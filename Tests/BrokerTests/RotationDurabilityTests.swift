import Foundation
import Logging
import OAuth
import Secrets
import StateStore
import Synchronization
import TestSupport
import Testing
@testable import Broker

/// A provider whose introspection (the new token's audience) answers only
/// when the test lets it: the window between a refresh's answer and the
/// record that confirms its audience.
final class HeldIntrospection: TokenEndpoint {
    let provider: ResourceProvider
    private let held = Mutex<(asked: Int, waiting: [CheckedContinuation<Void, Never>], open: Bool)>((0, [], false))
    var tokenURL: URL? { provider.tokenURL }

    init(_ provider: ResourceProvider) { self.provider = provider }

    var asked: Int { held.withLock { $0.asked } }

    /// Lets every introspection, waiting and later, answer.
    func open() {
        let waiting = held.withLock { state in
            state.open = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func audience(of accessToken: Secret) async -> AudienceReading {
        await withCheckedContinuation { continuation in
            let go = held.withLock { state in
                state.asked += 1
                if !state.open { state.waiting.append(continuation) }
                return state.open
            }
            if go { continuation.resume() }
        }
        return await provider.audience(of: accessToken)
    }

    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
        await provider.refresh(refreshToken: refreshToken, cookieHeader: cookieHeader)
    }

    func refresh(refreshToken: Secret, cookieHeader: String, target: RefreshTarget) async -> RefreshAnswer {
        await provider.refresh(refreshToken: refreshToken, cookieHeader: cookieHeader, target: target)
    }

    func revoke(token: Secret) async throws(TokenEndpointError) {}
}

/// A rotated refresh token is durable before anything is awaited for its
/// answer (issue 49, finding 2): a restart while the new token's audience is
/// still being confirmed must not find the spent refresh token on disk, or
/// the provider's reuse detection revokes the grant.
@Suite struct RotationDurabilityTests {
    @Test func theRotatedRefreshTokenIsOnDiskWhileItsAudienceIsStillBeingConfirmed() async throws {
        let provider = ResourceProvider(.narrows, resources: KeyedTokenTests.resources)
        let endpoint = HeldIntrospection(provider)
        let (session, file) = try await KeyedTokenTests.session(endpoint)
        await session.start()
        let refreshing = Task { try await session.refresh(staleGeneration: nil) }
        try await eventually { endpoint.asked == 1 }
        // The provider has rotated rt-0 to rt-1 and the audience is not yet known: as after a
        // crash now, a restarted tokend reads the disk.
        let onDisk = try #require(try file.load())
        #expect(onDisk.refreshToken == Secret("rt-1"), "the spent rt-0 would be replayed after a restart")
        #expect(onDisk.accessToken == Secret("session-token"), "the token served stays the confirmed one until then")
        endpoint.open()
        let token = try await refreshing.value
        #expect(token.accessToken == Secret("at-1"))
        let settled = try #require(try file.load())
        #expect(settled.refreshToken == Secret("rt-1") && settled.accessToken == Secret("at-1"))
        #expect(!provider.revoked)
    }
}
