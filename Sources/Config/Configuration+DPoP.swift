#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `dpop` and `dpop-key` (a session's), `tpm` ([daemon]): DPoP-bound tokens (RFC 9449).
extension TableReader {
    func dpop(into session: inout SessionSettings) throws(ConfigError) {
        session.dpop = try bool("dpop") ?? false
        if let storage = try oneOf("dpop-key", ["auto", "tpm", "state"]) {
            guard session.dpop else { throw problem("dpop-key", "is set but dpop is not: set dpop = true") }
            session.dpopKey = storage
        }
        try proofTargets(into: &session)
        // Hosts sharing a grant would have to share its key, which a TPM never lets go of.
        if session.dpop, session.sharedStore != nil {
            throw problem(
                "dpop",
                "a DPoP session cannot use shared-store: every host of a fleet would need the grant's private key, which DPoP exists to keep on one machine (see docs/fleet.md); use one session per host")
        }
    }

    /// `proof-targets`: absolute http(s) URLs without user, query or fragment. How their hosts are
    /// written is tokend's to judge (DPoP's TargetURL: a host not plainly written allows nothing).
    func proofTargets(into session: inout SessionSettings) throws(ConfigError) {
        guard let targets = try strings("proof-targets") else { return }
        guard session.dpop else { throw problem("proof-targets", "is set but dpop is not: set dpop = true") }
        for target in targets {
            guard let url = URLComponents(string: target), let scheme = url.scheme?.lowercased(),
                scheme == "https" || scheme == "http", let host = url.host, !host.isEmpty, url.user == nil,
                url.password == nil, url.query == nil, url.fragment == nil, target.utf8.count <= 2048
            else {
                throw problem(
                    "proof-targets",
                    "\"\(target)\" is not an http or https URL without user, query or fragment, e.g. \"https://api.example.com/v1/\"")
            }
            guard !session.proofTargets.contains(target) else { throw problem("proof-targets", "\"\(target)\" is listed twice") }
            session.proofTargets.append(target)
        }
        guard session.proofTargets.count <= Self.maximumResources else {
            throw problem("proof-targets", "at most \(Self.maximumResources) proof-targets per session")
        }
    }

    /// A tpm2-tss TCTI string: "device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321", "tabrmd:".
    func tpm() throws(ConfigError) -> String? {
        guard let tcti = try string("tpm") else { return nil }
        guard !tcti.isEmpty, tcti.utf8.count <= 512, !tcti.contains(where: { $0.isWhitespace || $0.isNewline }),
            let name = tcti.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first, !name.isEmpty
        else {
            throw problem("tpm", "must be a tpm2-tss TCTI string such as \"device:/dev/tpmrm0\" or \"swtpm:host=127.0.0.1,port=2321\"")
        }
        return tcti
    }
}

extension DaemonSettings {
    /// The TPM tokend uses: `tpm` when set, else the kernel's resource manager when there is one.
    public var tpmInUse: String? {
        if let tpm { return tpm }
        return FileManager.default.fileExists(atPath: Self.defaultTPMDevice) ? "device:\(Self.defaultTPMDevice)" : nil
    }

    public static let defaultTPMDevice = "/dev/tpmrm0"
}
