import Foundation

/// `dpop` and `dpop-key` (a session's), `tpm` ([daemon]): DPoP-bound tokens (RFC 9449).
extension TableReader {
    func dpop(into session: inout SessionSettings) throws(ConfigError) {
        session.dpop = try bool("dpop") ?? false
        if let storage = try oneOf("dpop-key", ["auto", "tpm", "state"]) {
            guard session.dpop else { throw problem("dpop-key", "is set but dpop is not: set dpop = true") }
            session.dpopKey = storage
        }
        // Hosts sharing a grant would have to share its key, which a TPM never lets go of.
        if session.dpop, session.sharedStore != nil {
            throw problem(
                "dpop",
                "a DPoP session cannot use shared-store: every host of a fleet would need the grant's private key, which DPoP exists to keep on one machine (see docs/fleet.md); use one session per host")
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
