import CTSS2
import DPoP
import Testing
@testable import TPMKeys

/// Which TPM answers make a session's key "not in this TPM" for good (only a
/// new login helps): at Load, the TPM's verdict that the blob is not its own
/// (integrity or binding). Anything else at Load fails the one signature.
@Suite struct TPMErrorTests {
    static let load = Int32(TOKEND_TPM_LOAD.rawValue)

    func kind(_ rc: TSS2_RC, step: Int32 = load) -> ProofKeyError.Kind {
        TPMThread.error(rc, step: step, tcti: "test").kind
    }

    @Test func anotherTPMsBlobIsNotInThisTPM() {
        #expect(kind(0x1DF) == .notInThisTPM)  // TPM_RC_INTEGRITY, parameter 1: what swtpm answers for another TPM's blob
        #expect(kind(0x1E5) == .notInThisTPM)  // TPM_RC_BINDING, parameter 1
    }

    @Test(arguments: [
        TSS2_RC(0x18B),  // TPM_RC_HANDLE, handle 1: a kept primary the TPM no longer knows
        TSS2_RC(0x101),  // TPM_RC_FAILURE: the TPM in failure mode
        TSS2_RC(0x100),  // TPM_RC_INITIALIZE: not started up
        TSS2_RC(0x2D5),  // TPM_RC_SIZE, parameter 2
        TSS2_RC(0x09A),  // TPM_RC_INSUFFICIENT
    ])
    func otherErrorsAtLoadAreNotForGood(_ rc: TSS2_RC) {
        #expect(kind(rc) == .failed)
    }

    @Test func warningsAreUnreachableForNow() {
        #expect(kind(0x921) == .unreachable)  // lockout
        #expect(kind(0x902) == .unreachable)  // object memory
        #expect(kind(0x910) == .unreachable)  // REFERENCE_H0: a handle not loaded
        #expect(TPMThread.error(0x921, step: Self.load, tcti: "t").description.contains("lockout"))
    }

    @Test func onlyAResourceManagerKeepsObjectsLoaded() {
        #expect(TPMThread.isManaged("device:/dev/tpmrm0"))
        #expect(TPMThread.isManaged("tabrmd:bus_type=system"))
        #expect(!TPMThread.isManaged("device:/dev/tpm0"))
        #expect(!TPMThread.isManaged("swtpm:host=127.0.0.1,port=2321"))
    }
}
