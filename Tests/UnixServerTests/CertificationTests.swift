import Foundation
import Logging
import Testing
import Varlink

@testable import UnixServer

/// The reference client's certification suite (Python `varlink`, from the
/// project's venv) against the server loop, in this process. The service
/// declares org.varlink.certification, so every call the suite makes is
/// checked against that declaration before it runs.
@Suite(.serialized) struct CertificationTests {
    static let python = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../.venv/bin/python").standardized.path

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: python), "needs the venv: make venv"))
    func theReferenceCertificationSuitePasses() async throws {
        let (path, running) = await Self.serve()
        let (status, printed) = try await Self.run(
            Self.python, ["-m", "varlink.tests.test_certification", "--client", "--varlink=unix:\(path)"])
        running.cancel()
        unlink(path)
        #expect(status == 0, "\(printed)")
        #expect(printed.contains("Certification passed"), "\(printed)")
    }

    @Test func aCallTheDeclarationRefusesIsAnsweredBeforeTheMethodRuns() async throws {
        let (path, running) = await Self.serve()
        defer {
            running.cancel()
            unlink(path)
        }
        let client = try TestClient(path: path)
        // Test02 would answer ClientIdError for an unknown client: it never runs.
        client.send(TestClient.frame("org.varlink.certification.Test02", #"{"client_id":"c","bool":"yes"}"#))
        #expect(client.reply() == VarlinkReply(.invalidParameter("bool")))
        client.send(TestClient.frame("org.varlink.certification.Test07", #"{"client_id":"c","struct":{"bool":true}}"#))
        #expect(client.reply() == VarlinkReply(.invalidParameter("struct")))
        client.send(TestClient.frame("org.varlink.certification.Test99", "{}"))
        #expect(client.reply()?.error == "org.varlink.service.MethodNotFound")
    }

    /// The certification service on a fresh socket, listening.
    static func serve() async -> (path: String, running: Task<Void, any Error>) {
        let path = NSTemporaryDirectory() + "certification-\(UUID().uuidString.prefix(8)).sock"
        var logger = Logger(label: "certification")
        logger.logLevel = .critical
        let server = VarlinkServer(service: certificationService, source: .path(path, mode: 0o600), logger: logger)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let running = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
        return (path, running)
    }

    @Test(.timeLimit(.minutes(1)))
    func aChildsOutputIsCollectedWhateverItsSize() async throws {
        // Far past a pipe's 64 KiB: a child that fills its pipe before exiting blocks for good.
        // (Not `yes | head`: with SIGPIPE ignored, as a process serving sockets has it, yes says "Broken pipe".)
        let (status, printed) = try await Self.run("/bin/sh", ["-c", "head -c 1000000 /dev/zero | tr '\\0' x"])
        #expect(status == 0)
        #expect(printed.utf8.count == 1_000_000)
    }

    /// Runs a child to its end with its output (and errors) in a file, which
    /// never fills: the child is not blocked on a reader that waits for its exit.
    static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let file = NSTemporaryDirectory() + "child-output-\(UUID().uuidString.prefix(8))"
        guard FileManager.default.createFile(atPath: file, contents: nil), let output = FileHandle(forWritingAtPath: file) else {
            throw CocoaError(.fileWriteUnknown)
        }
        defer { unlink(file) }
        let child = Process()
        child.executableURL = URL(fileURLWithPath: executable)
        child.arguments = arguments
        child.standardOutput = output
        child.standardError = output
        let (ended, endedContinuation) = AsyncStream<Void>.makeStream()
        child.terminationHandler = { _ in endedContinuation.finish() }
        try child.run()
        try output.close()
        for await _ in ended {}
        let printed = try String(contentsOfFile: file, encoding: .utf8)
        return (child.terminationStatus, printed)
    }
}
