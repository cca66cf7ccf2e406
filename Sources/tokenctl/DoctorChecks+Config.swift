/// The configuration parses: `tokend --check-config` reads it with tokend's
/// own parser and makes the start-time checks of secret and key files.
enum DoctorConfigCheck {
    static let name = "configuration"

    static func run(config: String, tokend: DoctorProgram?) -> DoctorResult {
        guard let tokend else {
            return .skip(name, "tokend is not installed beside tokenctl or on PATH, so \(config) was not checked")
        }
        guard let output = tokend.run(["--check-config", "--config", config]) else {
            return .skip(name, "\(tokend.path) cannot be run")
        }
        return judge(config: config, status: output.status, output: output.standardOutput + output.standardError)
    }

    /// `output` is what tokend printed: "tokend: PATH: valid (…)" or the problem, naming file and key.
    static func judge(config: String, status: Int32, output: String) -> DoctorResult {
        let said = output.split(separator: "\n").map { line in
            line.hasPrefix("tokend: ") ? String(line.dropFirst("tokend: ".count)) : String(line)
        }.joined(separator: "; ")
        if status == 0 { return .ok(name, said.isEmpty ? "\(config): valid" : said) }
        return .fail(
            name, said.isEmpty ? "tokend --check-config ended with status \(status)" : said,
            fix: "correct \(config) where named (every key: man tokend.toml), then check again with "
                + "`tokend --check-config --config \(config)`")
    }
}
