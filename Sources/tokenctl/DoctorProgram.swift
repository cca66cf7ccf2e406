import Foundation

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
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return nil
        }
        // Standard error is drained on another thread while standard output is read here.
        let errorData = DrainedPipe(errors)
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus, standardOutput: String(decoding: outputData, as: UTF8.self),
            standardError: String(decoding: errorData.wait(), as: UTF8.self))
    }
}

/// A pipe read to its end on a thread of its own.
private final class DrainedPipe: @unchecked Sendable {
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    /// Everything written to the pipe, once its writer closed it.
    func wait() -> Data {
        done.wait()
        return data
    }
}
