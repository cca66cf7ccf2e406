import Broker
import Config
import DPoP
import TPMKeys

extension SessionSettings {
    /// Where the session's DPoP keys are made and read (dpop, dpop-key); nil without dpop.
    /// `tpm`: the TCTI of the TPM tokend may use ([daemon] tpm, else /dev/tpmrm0 when present).
    /// Stored keys are read back wherever they live, whatever dpop-key now
    /// says: a change applies at the next login.
    func dpopSettings(tpm: String?) throws -> DPoPSettings? {
        guard dpop else { return nil }
        let state = StateKeyStore()
        let inTPM = tpm.map(TPMKeyStore.init(tcti:))
        let stores: [any ProofKeyStore] = [state] + (inTPM.map { [$0] } ?? [])
        switch dpopKey {
        case "state":
            return DPoPSettings(newKeys: state, stores: stores)
        case "tpm":
            guard let inTPM else {
                throw DaemonSetupError(
                    "session \(name): dpop-key = \"tpm\" needs a TPM: there is no \(DaemonSettings.defaultTPMDevice) and [daemon] tpm is not set")
            }
            return DPoPSettings(newKeys: inTPM, stores: stores)
        default:
            return DPoPSettings(newKeys: AutoKeyStore(tpm: inTPM), stores: stores)
        }
    }
}
