#if canImport(FoundationEssentials)
import FoundationEssentials
#else
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#endif

/// Another program the doctor asks (tokend, curl, systemctl): found beside
/// tokenctl or on PATH, run to its end, its output kept.
struct DoctorProgram {
    struct Output {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    let path: String

    /// Beside this tokenctl first (a build directory, or /usr/bin for both),
    /// then PATH, then the system directories a user's PATH may lack.
    static func find(_ name: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> DoctorProgram?
    {
        let path = environment["PATH"] ?? ""
        let candidates = [BrowserBridgeCommand.besideThisProgram(name)]
            + path.split(separator: ":").map { "\($0)/\(name)" }
            + ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"].map { "\($0)/\(name)" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }.map(DoctorProgram.init)
    }

    /// nil when it cannot be started. Its output is read while it runs, so a
    /// long answer never blocks it on a full pipe.
    func run(_ arguments: [String], environment: [String: String]? = nil) -> Output? {
        guard let child = ChildProcess.start(path, arguments: arguments, environment: environment, capture: true) else {
            return nil
        }
        let outcome = child.finish()
        return Output(
            status: outcome.status, standardOutput: String(decoding: outcome.output, as: UTF8.self),
            standardError: String(decoding: outcome.errors, as: UTF8.self))
    }
}
