#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// The configuration parses: `tokend --check-config` reads it with tokend's
/// own parser and makes the start-time checks of secret and key files.
enum DoctorConfigCheck {
    static let name = "configuration"

    static func run(config: String, tokend: DoctorProgram?, environment: [String: String], standIns: String?)
        -> DoctorResult
    {
        guard let tokend else {
            return .skip(name, "tokend is not installed beside tokenctl or on PATH, so \(config) was not checked")
        }
        guard let output = tokend.run(["--check-config", "--config", config], environment: environment) else {
            return .skip(name, "\(tokend.path) cannot be run")
        }
        return judge(
            config: config, status: output.status, output: output.standardOutput + output.standardError,
            standIns: standIns)
    }

    /// `output` is what tokend printed: "tokend: PATH: valid (…)" or the problem, naming file and key.
    /// A problem with a stand-in for the unit's credentials is not one: the real
    /// credential is tokend.service's, and tokend checks it when it starts.
    static func judge(config: String, status: Int32, output: String, standIns: String? = nil) -> DoctorResult {
        let said = output.split(separator: "\n").map { line in
            line.hasPrefix("tokend: ") ? String(line.dropFirst("tokend: ".count)) : String(line)
        }.joined(separator: "; ")
        if status == 0 { return .ok(name, said.isEmpty ? "\(config): valid" : said) }
        if let standIns, said.includes(standIns) {
            return .ok(name, "\(config) parses; its secret or key is a credential of tokend.service, which tokend checks when it starts")
        }
        return .fail(
            name, said.isEmpty ? "tokend --check-config ended with status \(status)" : said,
            fix: "correct \(config) where named (every key: man tokend.toml), then check again with "
                + "`tokend --check-config --config \(config)`")
    }
}

/// Outside tokend.service the credentials it hands tokend (a client secret,
/// a client key) are not there, and the configuration's parser wants a
/// readable $CREDENTIALS_DIRECTORY/NAME for each: stand-ins take their place,
/// in a private directory removed afterwards. Nothing reads their content as a secret.
struct CredentialStandIns {
    let directory: String

    /// nil when there is no credential to stand in for, or no directory can be made.
    static func make(for names: Set<String>) -> CredentialStandIns? {
        guard !names.isEmpty else { return nil }
        var template = Array("/tmp/tokenctl-doctor-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return nil }
        let directory = String(cString: made)
        // Long enough for any length check of a secret (client_secret_jwt's HS256 wants 32 bytes).
        let placeholder = Data((String(repeating: "x", count: 64) + "\n").utf8)
        for name in names where !name.includes("/") {
            _ = FileManager.default.createFile(
                atPath: "\(directory)/\(name)", contents: placeholder, attributes: [.posixPermissions: 0o600])
        }
        return CredentialStandIns(directory: directory)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}
