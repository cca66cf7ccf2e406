import CTSS2
import DPoP

extension TPMThread {
    /// What a failed step means. Only the TPM's own verdict on the blob at
    /// Load (its integrity or binding check failed: another TPM wrapped it,
    /// or this one was cleared) says the key is not this TPM's, which a
    /// session takes for good (log in again). A TPM that warns (TPM2_RC_WARN:
    /// lockout, retry, self-test, out of memory, a handle not loaded) is
    /// unreachable for now, whatever the step; any other error fails this
    /// signature only.
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
        case TOKEND_TPM_LOAD.rawValue where tokend_tpm_load_refused(rc) != 0:
            return ProofKeyError(.notInThisTPM, "the TPM (\(tcti)) refused to load the key: \(said)")
        case TOKEND_TPM_LOAD.rawValue where fromTPM:
            return ProofKeyError(.failed, "the TPM (\(tcti)) could not load the key now: \(said)")
        case TOKEND_TPM_BLOB.rawValue:
            return ProofKeyError(.failed, "the TPM key blob is damaged: \(said)")
        default:
            return ProofKeyError(fromTPM ? .failed : .unreachable, "the TPM (\(tcti)) failed: \(said)")
        }
    }

    /// Whether the TCTI reaches the TPM through a resource manager, which
    /// keeps each connection's objects apart and flushes them when it closes:
    /// only then does tokend keep its connection and objects loaded (keep.h).
    static func isManaged(_ tcti: String) -> Bool {
        tcti.hasPrefix("device:/dev/tpmrm") || tcti == "tabrmd" || tcti.hasPrefix("tabrmd:")
    }
}
