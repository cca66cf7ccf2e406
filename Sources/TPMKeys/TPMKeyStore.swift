import CTSS2
import Crypto
import DPoP

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

/// A key in the TPM: signatures go through the TPM's thread (TPMThread),
/// which keeps the key loaded or its saved context between them (keep.h).
public struct TPMProofKey: ProofKey {
    let tcti: String
    let blob: [UInt8]
    public let publicKey: P256PublicJWK
    var lane: TPMThread.Lane = .session
    public var storage: KeyStorage { .tpm }
    public var stored: [UInt8] { blob }

    init(tcti: String, blob: [UInt8], publicKey: P256PublicJWK) {
        self.tcti = tcti
        self.blob = blob
        self.publicKey = publicKey
    }

    public var forRequests: any ProofKey {
        var key = self
        key.lane = .requests
        return key
    }

    public func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] {
        let digest = Array(SHA256.hash(data: message))
        let (tcti, blob) = (self.tcti, self.blob)
        let managed: Int32 = TPMThread.isManaged(tcti) ? 1 : 0
        let thread = TPMThread.shared
        let signed: Result<[UInt8], ProofKeyError> = await thread.run(tcti: tcti, lane: lane, signature: true) {
            var signature = [UInt8](repeating: 0, count: 64)
            var step: Int32 = 0
            let rc = tokend_keeper_sign(thread.keeper, tcti, managed, blob, blob.count, digest, &signature, &step)
            guard rc == TSS2_RC_SUCCESS else { return .failure(TPMThread.error(rc, step: step, tcti: tcti)) }
            return .success(signature)
        }
        return try signed.get()
    }
}

/// What one proof with a key in the TPM takes the chip (measured; a slow
/// discrete chip's time until the first signature): GetProof's bounds for
/// keys in a TPM are derived from it.
public enum TPMSigning {
    public static var time: Duration { TPMThread.shared.signingTime }
    /// What a proof is taken to take until one was measured: a slow discrete chip's.
    public static var assumed: Duration { SigningTime.assumed }
    /// GetProof calls waiting for the TPM hold at most this much of its time; more are refused.
    public static var requestsWait: Duration { TPMThread.requestsWait }
}

/// dpop-key = "auto": a new key in the TPM when tokend can use one, else in
/// the state. A TPM that is there but busy, locked out or not answering is
/// asked again for a few seconds and then fails the login, saying why: a key
/// in the state is copied with the state, and the grant stays bound to it for
/// its whole life, so a moment's busy chip must not downgrade it unseen.
/// Only a host where tpm2-tss is missing gets a key in the state.
public struct AutoKeyStore: ProofKeyStore {
    let tpm: (any ProofKeyStore)?
    let state = StateKeyStore()
    /// The pauses before asking the TPM again.
    let pauses: [Duration]
    let tssMissing: @Sendable () -> ProofKeyError?

    public init(tpm: TPMKeyStore?) {
        self.init(inTPM: tpm, pauses: [.seconds(1), .seconds(3)], tssMissing: { TPMThread.missingLibrary })
    }

    init(
        inTPM: (any ProofKeyStore)?, pauses: [Duration], tssMissing: @escaping @Sendable () -> ProofKeyError?
    ) {
        self.tpm = inTPM
        self.pauses = pauses
        self.tssMissing = tssMissing
    }

    public var storage: KeyStorage { tpm == nil ? .state : .tpm }

    public func makeKey() async throws(ProofKeyError) -> any ProofKey {
        guard let tpm else { return try await state.makeKey() }
        if tssMissing() != nil { return try await state.makeKey() }
        var pauses = self.pauses[...]
        while true {
            do {
                return try await tpm.makeKey()
            } catch where error.kind == .unreachable || error.kind == .busy {
                guard let pause = pauses.popFirst(), (try? await Task.sleep(for: pause)) != nil else {
                    throw ProofKeyError(
                        .unreachable,
                        "dpop-key = \"auto\" and the TPM is there but made no key (\(error.description)); no key is "
                            + "made in the state instead, which would be copied with it: log in again once the TPM "
                            + "answers, or set dpop-key = \"state\"")
                }
            }
        }
    }

    public func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey {
        try state.load(stored: stored)
    }
}
