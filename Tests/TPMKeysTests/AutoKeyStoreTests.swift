import DPoP
import Synchronization
import Testing
@testable import TPMKeys

/// dpop-key = "auto" with a TPM that is there but busy: asked again, then the
/// login fails saying why; never a key in the state unseen.
@Suite struct AutoKeyStoreTests {
    /// A TPM that fails `failures` times (busy), then makes keys (in the state's form, but storage .tpm).
    final class BusyTPM: ProofKeyStore, Sendable {
        let failures: Int
        let asked = Mutex(0)
        init(failures: Int) { self.failures = failures }
        var storage: KeyStorage { .tpm }
        func makeKey() async throws(ProofKeyError) -> any ProofKey {
            let count = asked.withLock { $0 += 1; return $0 }
            guard count > failures else { throw ProofKeyError(.unreachable, "the TPM (test) is busy: retry") }
            return Made(inner: StateProofKey())
        }
        func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey { throw ProofKeyError(.failed, "unused") }
    }

    struct Made: ProofKey {
        let inner: StateProofKey
        var publicKey: P256PublicJWK { inner.publicKey }
        var storage: KeyStorage { .tpm }
        var stored: [UInt8] { inner.stored }
        func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] { try await inner.sign(message) }
    }

    @Test func aBusyTPMIsAskedAgainAndItsKeyTaken() async throws {
        let tpm = BusyTPM(failures: 2)
        let store = AutoKeyStore(inTPM: tpm, pauses: [.milliseconds(1), .milliseconds(1)], tssMissing: { nil })
        let key = try await store.makeKey()
        #expect(key.storage == .tpm)
        #expect(tpm.asked.withLock { $0 } == 3)
    }

    @Test func aTPMBusyThroughoutFailsTheLoginLoudly() async {
        let tpm = BusyTPM(failures: 100)
        let store = AutoKeyStore(inTPM: tpm, pauses: [.milliseconds(1), .milliseconds(1)], tssMissing: { nil })
        do {
            let key = try await store.makeKey()
            Issue.record("a key was made in the \(key.storage) while the TPM was busy")
        } catch {
            #expect(error.kind == .unreachable)
            #expect(error.description.contains("dpop-key = \"state\"") && error.description.contains("busy"))
        }
        #expect(tpm.asked.withLock { $0 } == 3)
    }

    /// A host without tpm2-tss has no TPM tokend can use: auto means the state there.
    @Test func withoutTheTSSTheKeyIsInTheState() async throws {
        let store = AutoKeyStore(
            inTPM: BusyTPM(failures: 0), pauses: [], tssMissing: { ProofKeyError(.unreachable, "missing") })
        #expect(try await store.makeKey().storage == .state)
    }
}
