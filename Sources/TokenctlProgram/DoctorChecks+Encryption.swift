#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink

/// Encryption at rest: the state key tokend seals session files with
/// (the systemd credential tokend.state-key, else daemon.state-key-file), and
/// what the session files themselves say (`encryption` in their envelope).
enum DoctorEncryptionCheck {
    static let name = "encryption at rest"
    static let credential = "tokend.state-key"

    /// What was found; each part nil when it could not be looked at.
    struct Facts: Equatable, Sendable {
        var keyFile: String?
        var keyFileFacts: FileFacts?
        /// The unit loads the credential tokend.state-key (nil: no systemd unit to read).
        var unitLoadsCredential: Bool?
        /// Each readable session file's `encryption`: "none" or "aes-256-gcm".
        var fileEncryptions: [String: String] = [:]
    }

    static func judge(_ facts: Facts, daemon: DaemonIdentity?) -> DoctorResult {
        let plain = facts.fileEncryptions.filter { $0.value == "none" }.keys.sorted()
        let sealNow = "tokend seals plain files at its next start"
        if facts.unitLoadsCredential == true {
            return plain.isEmpty
                ? .ok(name, "sealed with the systemd credential \(credential)")
                : .warn(name, "the credential \(credential) is loaded, but \(plain.joined(separator: ", ")) is still plain",
                        fix: "systemctl restart tokend (\(sealNow))")
        }
        if let keyFile = facts.keyFile {
            guard let key = facts.keyFileFacts else {
                return .fail(
                    name, "daemon.state-key-file \(keyFile) does not exist",
                    fix: "tokend --generate-state-key > \(keyFile) && chmod 0600 \(keyFile)")
            }
            if key.mode & 0o077 != 0 {
                return .fail(
                    name, "\(keyFile) has mode \(String.octalMode(key.mode)): others may read the state key",
                    fix: "chmod 0600 \(keyFile)")
            }
            if let daemon, daemon.uid != 0, key.uid != daemon.uid {
                let user = DoctorSocketCheck.userName(daemon.uid)
                return .fail(
                    name, "\(keyFile) belongs to \(DoctorSocketCheck.userName(key.uid)): tokend (\(user)) cannot read it",
                    fix: "chown \(user): \(keyFile)")
            }
            return plain.isEmpty
                ? .ok(name, "sealed with the key in \(keyFile)")
                : .warn(name, "\(plain.joined(separator: ", ")) is still plain", fix: "systemctl restart tokend (\(sealNow))")
        }
        return .warn(
            name, "no state key: session files hold the refresh token in plain text (mode 0600)",
            fix: "tokend --generate-state-key | systemd-creds encrypt --name=\(credential) - /etc/credstore.encrypted/\(credential) "
                + "and LoadCredentialEncrypted=\(credential) in a drop-in (or a 0600 file named by daemon.state-key-file)")
    }

    static func probe(stateDirectory: String, keyFile: String?, systemd: DoctorSystemd?) -> Facts {
        var facts = Facts(keyFile: keyFile, keyFileFacts: keyFile.flatMap(FileFacts.of))
        facts.unitLoadsCredential = systemd?.credentials("tokend.service")?.contains(credential)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: stateDirectory)) ?? []
        for name in names where name.hasSuffix(".session") {
            guard let data = FileManager.default.contents(atPath: "\(stateDirectory)/\(name)"),
                let envelope = try? JSONParser.parse(Array(data)),
                let encryption = envelope["encryption"]?.stringValue
            else { continue }
            facts.fileEncryptions[name] = encryption
        }
        return facts
    }
}
