import Testing
import TokendClient
@testable import TokenctlProgram

/// `tokenctl doctor` on DPoP sessions, from tokend's status.
@Suite struct DoctorDPoPTests {
    typealias Status = DPoPStatus

    @Test func aBoundKeyIsOk() {
        let results = DoctorDPoPCheck.judge(
            Status(thumbprint: "abc", keyStorage: "tpm", binding: "verified"), session: "g", librariesMissing: [])
        #expect(results == [.ok("DPoP (g)", "key abc in the tpm, binding verified")])
    }

    @Test func aKeyNotInThisTPMFailsWithTheLogin() {
        let results = DoctorDPoPCheck.judge(
            Status(thumbprint: "abc", keyStorage: "tpm", binding: "verified",
                   problem: "this session's key is not in this machine's TPM — log in again"),
            session: "g", librariesMissing: [])
        #expect(results.count == 1 && results[0].outcome == .fail)
        #expect(results[0].fix == "tokenctl login --session g (a new login makes a new key)")
    }

    @Test func bearerAnswersAreAWarningAndMissingLibrariesAFailure() {
        let results = DoctorDPoPCheck.judge(
            Status(thumbprint: "abc", keyStorage: "tpm", binding: "unverified"), session: "g",
            librariesMissing: ["libtss2-esys.so.0"])
        #expect(results.map(\.outcome) == [.warn, .fail])
        #expect(results[1].detail.contains("libtss2-esys.so.0"))
    }

    @Test func theLibrariesAreFoundHere() {
        // Installed with libtss2-dev (make deps): tokend's TPM keys work on this machine.
        #expect(DoctorDPoPCheck.missingLibraries() == [])
    }
}
