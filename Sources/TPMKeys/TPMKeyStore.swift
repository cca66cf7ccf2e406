import CTSS2
import Crypto
import DPoP
import Dispatch
import Synchronization

/// DPoP keys in a TPM 2.0 (dpop-key = "tpm"), through tpm2-tss ESAPI: made
/// inside the TPM as non-exportable P-256 signing keys under the owner
/// hierarchy's primary key; the state file keeps only the TPM-wrapped blob,
/// which no other TPM can load.
public struct TPMKeyStore: ProofKeyStore {
    /// The tpm2-tss TCTI string ("device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321").
    public let tcti: String

    public init(tcti: String) {
        self.tcti = tcti
    }

    public var storage: KeyStorage { .tpm }

    public func makeKey() async throws(ProofKeyError) -> any ProofKey {
        let tcti = self.tcti
        let made: Result<([UInt8], [UInt8]), ProofKeyError> = await TPMThread.shared.run(tcti: tcti) {
            var blob = [UInt8](repeating: 0, count: TPMThread.blobLimit)
            var size = blob.count
            var point = [UInt8](repeating: 0, count: 64)
            var step: Int32 = 0
            let rc = tokend_tpm_make_key(tcti, &blob, &size, &point, &step)
            guard rc == TSS2_RC_SUCCESS else { return .failure(TPMThread.error(rc, step: step, tcti: tcti)) }
            return .success((Array(blob[0..<size]), point))
        }
        let (blob, point) = try made.get()
        guard let jwk = P256PublicJWK(point: point) else { throw ProofKeyError(.failed, "the TPM made no P-256 key") }
        return TPMProofKey(tcti: tcti, blob: blob, publicKey: jwk)
    }

    /// Reads the public key from the blob; whether this TPM can load it shows at the first signature.
    public func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey {
        if let missing = TPMThread.missingLibrary { throw missing }
        var point = [UInt8](repeating: 0, count: 64)
        guard tokend_tpm_blob_point(stored, stored.count, &point) == TSS2_RC_SUCCESS, let jwk = P256PublicJWK(point: point)
        else {
            throw ProofKeyError(.failed, "the stored TPM key blob is damaged")
        }
        return TPMProofKey(tcti: tcti, blob: stored, publicKey: jwk)
    }
}

/// A key in the TPM: each signature loads the blob under a primary key made
/// afresh, signs with TPM2_Sign and flushes both, on the TPM's own thread.
public struct TPMProofKey: ProofKey {
    let tcti: String
    let blob: [UInt8]
    public let publicKey: P256PublicJWK
    public var storage: KeyStorage { .tpm }
    public var stored: [UInt8] { blob }

    public func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] {
        let digest = Array(SHA256.hash(data: message))
        let (tcti, blob) = (self.tcti, self.blob)
        let signed: Result<[UInt8], ProofKeyError> = await TPMThread.shared.run(tcti: tcti) {
            var signature = [UInt8](repeating: 0, count: 64)
            var step: Int32 = 0
            let rc = tokend_tpm_sign(tcti, blob, blob.count, digest, &signature, &step)
            guard rc == TSS2_RC_SUCCESS else { return .failure(TPMThread.error(rc, step: step, tcti: tcti)) }
            return .success(signature)
        }
        return try signed.get()
    }
}

/// ESAPI calls block (milliseconds on a real chip, longer when it is busy):
/// they run one at a time on a thread of their own, never on a server loop
/// or an actor's executor. A TPM that never answers holds that thread until
/// it does (a blocked read cannot be taken back); meanwhile every call that
/// would queue behind it fails at once as unreachable instead of waiting,
/// and the callers' own deadline (the session's) bounds the one that hangs.
final class TPMThread: Sendable {
    static let shared = TPMThread()
    let queue = DispatchQueue(label: "tokend.tpm")
    /// When the call on the thread began; nil when none runs.
    let running = Mutex<ContinuousClock.Instant?>(nil)
    /// A call that has not come back within this is taken for a TPM that does not answer.
    static let stuckAfter: Duration = .seconds(5)

    static let blobLimit = MemoryLayout<TPM2B_PUBLIC>.size + MemoryLayout<TPM2B_PRIVATE>.size

    /// tpm2-tss is opened when first used (see CTSS2): on a host without it, keys in a TPM cannot be made or used.
    static var missingLibrary: ProofKeyError? {
        guard let missing = tokend_tss2_missing() else { return nil }
        return ProofKeyError(
            .unreachable,
            "tpm2-tss is not installed (\(String(cString: missing)) is missing; Debian: libtss2-esys-3.0.2-0, libtss2-tctildr0, libtss2-mu0, libtss2-rc0)")
    }

    func run<T: Sendable>(
        tcti: String, _ body: @escaping @Sendable () -> Result<T, ProofKeyError>
    ) async -> Result<T, ProofKeyError> {
        if let began = running.withLock({ $0 }), ContinuousClock.now - began > Self.stuckAfter {
            return .failure(ProofKeyError(
                .unreachable, "the TPM (\(tcti)) has not answered for \(ContinuousClock.now - began): tokend tries again later"))
        }
        return await withCheckedContinuation { continuation in
            queue.async {
                self.running.withLock { $0 = ContinuousClock.now }
                let result = body()
                self.running.withLock { $0 = nil }
                continuation.resume(returning: result)
            }
        }
    }

    /// What a failed step means: a TPM that refuses to load the blob did not
    /// make it (the state was copied elsewhere, or the TPM was cleared); a TPM
    /// that warns (TPM2_RC_WARN) is unreachable for now, whatever the step.
    static func error(_ rc: TSS2_RC, step: Int32, tcti: String) -> ProofKeyError {
        if let missing = missingLibrary { return missing }
        let said = String(cString: tokend_tss2_decode(rc))
        let fromTPM = rc & 0xFF_0000 == 0  // the TPM's own answer, not the TSS's
        switch UInt32(step) {
        case TOKEND_TPM_CONNECT.rawValue:
            return ProofKeyError(.unreachable, "the TPM (\(tcti)) cannot be reached: \(said)")
        case _ where tokend_tpm_rc_is_warning(rc) != 0:
            // Lockout, retry, self-test, out of memory: the TPM says "not now", not "not this key".
            let why = rc == 0x921 /* TPM2_RC_LOCKOUT */ ? "is in dictionary-attack lockout" : "is busy"
            return ProofKeyError(.unreachable, "the TPM (\(tcti)) \(why): \(said); tokend tries again later")
        case TOKEND_TPM_LOAD.rawValue where fromTPM:
            return ProofKeyError(.notInThisTPM, "the TPM (\(tcti)) refused to load the key: \(said)")
        case TOKEND_TPM_BLOB.rawValue:
            return ProofKeyError(.failed, "the TPM key blob is damaged: \(said)")
        default:
            return ProofKeyError(fromTPM ? .failed : .unreachable, "the TPM (\(tcti)) failed: \(said)")
        }
    }
}

/// dpop-key = "auto": a new key in the TPM when one answers, else in the state.
public struct AutoKeyStore: ProofKeyStore {
    let tpm: TPMKeyStore?
    let state = StateKeyStore()

    public init(tpm: TPMKeyStore?) {
        self.tpm = tpm
    }

    public var storage: KeyStorage { tpm == nil ? .state : .tpm }

    public func makeKey() async throws(ProofKeyError) -> any ProofKey {
        guard let tpm else { return try await state.makeKey() }
        do {
            return try await tpm.makeKey()
        } catch where error.kind == .unreachable {
            return try await state.makeKey()
        }
    }

    public func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey {
        try state.load(stored: stored)
    }
}
