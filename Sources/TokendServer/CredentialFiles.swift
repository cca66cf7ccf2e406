import Config
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension SessionSettings {
    /// Refuses a secret, key or password file that users other than tokend's
    /// own (and its group's) may read, as StateStore refuses state files others
    /// may write: tokend does not start (exit 78), `--check-config` fails, and a
    /// reload keeps the sessions it has. A systemd credential's copy is
    /// private (0400) and passes; `tokenctl doctor` checks the file it was loaded from.
    func checkCredentialModes() throws(DaemonSetupError) {
        let ownGroup = getegid()
        for file in credentialFiles {
            var info = stat()
            // One that cannot be read is named by the parser and by endpoint().
            guard stat(file.path, &info) == 0 else { continue }
            let mode = UInt32(info.st_mode) & 0o7777
            guard let who = CredentialFile.exposure(mode: mode, group: info.st_gid, ownGroup: ownGroup) else { continue }
            throw DaemonSetupError(
                "session \(name): \(file.key) \(file.path) is readable by \(who) (mode 0\(String(mode, radix: 8))), "
                    + "so they can read \(file.holds); fix: \(file.fix(ownGroup: ownGroup))")
        }
    }
}
