import Foundation
import Logging
import Testing
import Varlink

@testable import UnixServer

/// The reference client's certification suite (Python `varlink`, from the
/// project's venv) against the server loop, in this process.
@Suite(.serialized) struct CertificationTests {
    static let python = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../.venv/bin/python").standardized.path

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: python), "needs the venv: make venv"))
    func theReferenceCertificationSuitePasses() async throws {
        let path = NSTemporaryDirectory() + "certification-\(UUID().uuidString.prefix(8)).sock"
        var logger = Logger(label: "certification")
        logger.logLevel = .critical
        let server = VarlinkServer(service: certificationService, source: .path(path, mode: 0o600), logger: logger)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let running = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
        let suite = Process()
        suite.executableURL = URL(fileURLWithPath: Self.python)
        suite.arguments = ["-m", "varlink.tests.test_certification", "--client", "--varlink=unix:\(path)"]
        let output = Pipe()
        suite.standardOutput = output
        suite.standardError = output
        try suite.run()
        while suite.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        running.cancel()
        unlink(path)
        #expect(suite.terminationStatus == 0, "\(printed)")
        #expect(printed.contains("Certification passed"), "\(printed)")
    }
}
