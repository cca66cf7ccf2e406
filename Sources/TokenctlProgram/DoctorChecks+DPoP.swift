#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import TokendClient

/// A DPoP session (dpop in tokend.toml), as tokend's status tells it: the
/// key, whether the provider binds its tokens, and for a key in a TPM
/// whether the TSS libraries tokend opens are there.
enum DoctorDPoPCheck {
    static func judge(_ dpop: DPoPStatus, session: String, librariesMissing: [String]) -> [DoctorResult] {
        let check = "DPoP (\(session))"
        var results: [DoctorResult] = []
        if let problem = dpop.problem {
            let fix = problem.includes("log in again")
                ? "tokenctl login --session \(session) (a new login makes a new key)"
                : "tokenctl status --session \(session), and tokend's journal"
            results.append(.fail(check, problem, fix: fix))
        } else if let thumbprint = dpop.thumbprint {
            switch dpop.binding {
            case "unverified":
                results.append(.warn(
                    check, "key \(thumbprint) in the \(dpop.keyStorage); the provider answered token type Bearer: it binds only refresh tokens, or ignored the proof (the two cannot be told apart)",
                    fix: "check that the provider requires DPoP of this client"))
            default:
                results.append(.ok(check, "key \(thumbprint) in the \(dpop.keyStorage), binding \(dpop.binding)"))
            }
        } else {
            results.append(.skip(check, "no key yet: the next login makes one in the \(dpop.keyStorage)"))
        }
        if dpop.keyStorage == "tpm", !librariesMissing.isEmpty {
            results.append(.fail(
                "TPM libraries (\(session))", "\(librariesMissing.joined(separator: ", ")) cannot be opened",
                fix: "apt install libtss2-esys-3.0.2-0 libtss2-tctildr0 libtss2-mu0 libtss2-rc0"))
        }
        return results
    }

    /// The tpm2-tss libraries tokend opens for keys in a TPM, those that cannot be opened here.
    static func missingLibraries() -> [String] {
        ["libtss2-esys.so.0", "libtss2-tctildr.so.0", "libtss2-mu.so.0", "libtss2-rc.so.0"].filter { name in
            guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { return true }
            dlclose(handle)
            return false
        }
    }
}
