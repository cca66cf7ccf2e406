import DPoP
import Foundation
import Logging
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

/// A session whose DPoP key is not in this machine's TPM (the state copied
/// elsewhere, the TPM cleared) hands out no token at all: not its own, and not
/// a cached per-resource one, from the actor or the server's fast path.
@Suite struct ProofKeyGoneTests {
    /// A TPM that refuses every stored key as another TPM's.
    struct OtherTPM: ProofKeyStore {
        var storage: KeyStorage { .tpm }
        func makeKey() async throws(ProofKeyError) -> any ProofKey { throw ProofKeyError(.unreachable, "unused") }
        func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey { Gone(inner: try StateProofKey(stored: stored)) }
    }

    struct Gone: ProofKey {
        let inner: StateProofKey
        var publicKey: P256PublicJWK { inner.publicKey }
        var storage: KeyStorage { .tpm }
        var stored: [UInt8] { inner.stored }
        func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] {
            throw ProofKeyError(.notInThisTPM, "the TPM (test) refused to load the key: integrity check failed")
        }
    }

    @Test func cachedPerResourceTokensAreNotHandedOut() async throws {
        let clock = TestClock()
        let directory = NSTemporaryDirectory() + "tokend-broker-\(UUID().uuidString.prefix(8))"
        let file = try StateStore(directory: directory).file(for: "default")
        let api = "https://api.example.com"
        let session = SessionActor(
            name: "default", policy: RefreshPolicy(refreshMargin: 60, minValid: 30, defaultLifetime: 300),
            endpoint: FakeEndpoint(), file: file, clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), random: { 0.5 },
            keys: KeyPolicy(resources: [api], narrowing: .keepsWide),
            dpop: DPoPSettings(newKeys: OtherTPM(), stores: [OtherTPM(), StateKeyStore()]))
        let key = StateProofKey()
        let now = Int(clock.now())
        var record = SessionRecord(
            phase: .active, refreshToken: Secret("refresh-0"), accessToken: Secret("session-token"), tokenType: "DPoP",
            expiresAt: now + 3600, expirySource: "expires_in", generation: 1, lastRefreshAt: now)
        record.grantResources = [api]
        record.keyedTokens = [
            KeyedToken(
                resource: api, scope: nil, accessToken: Secret("api-token"), tokenType: "DPoP", grantedScope: nil,
                expiresAt: now + 3600, generation: 1, lastRefreshAt: now, lastUsedAt: now)
        ]
        record.dpopKey = DPoPKeyRecord(storage: "tpm", thumbprint: key.thumbprint, material: Secret(Base64URL.encode(key.stored)))
        try file.saveNow(record)
        await session.start()
        // The key is tried once when taken into use: this TPM says it is not its own.
        try await eventually { await session.status().dpop?.problem == ProofKeyError.notInThisTPMReason }
        let resource = TokenKey(resource: api, scope: nil)
        #expect(session.cachedTokenAndLife(minValidSeconds: nil, key: resource) == nil)
        #expect(session.cachedTokenAndLife(minValidSeconds: nil) == nil)
        await #expect(throws: BrokerError.self) { try await session.getToken(minValidSeconds: nil, key: resource) }
        await #expect(throws: BrokerError.self) { try await session.getToken(minValidSeconds: nil) }
    }
}
