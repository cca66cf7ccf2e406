import Foundation
import Secrets
import Testing
@testable import StateStore

struct SimulatedCrash: Error {}

@Suite struct StateStoreTests {
    let directory: String

    init() throws {
        directory = NSTemporaryDirectory() + "tokend-state-\(UUID().uuidString.prefix(8))"
    }

    func record(_ generation: Int) -> SessionRecord {
        SessionRecord(
            phase: .active, refreshToken: Secret("refresh-\(generation)"), accessToken: Secret("access-\(generation)"),
            tokenType: "Bearer", expiresAt: 1000 + generation, expirySource: "expires_in", generation: generation)
    }

    @Test func roundTripsWithTightModes() async throws {
        let store = try StateStore(directory: directory)
        let file = store.file(for: "default")
        try await file.save(record(1))
        #expect(try file.load() == record(1))
        var info = stat()
        stat(file.path, &info)
        #expect(info.st_mode & 0o777 == 0o600)
        stat(directory, &info)
        #expect(info.st_mode & 0o777 == 0o700)
    }

    @Test func missingFileIsNoRecord() throws {
        #expect(try StateStore(directory: directory).file(for: "none").load() == nil)
    }

    /// A crash after any step of a write leaves a readable file holding
    /// either the previous record or the new one — never garbage or nothing.
    @Test(arguments: AtomicFile.Step.allCases)
    func crashBetweenWriteStepsKeepsAReadableState(_ step: AtomicFile.Step) throws {
        let file = try StateStore(directory: directory).file(for: "default")
        try file.saveNow(record(1))
        #expect(throws: SimulatedCrash.self) {
            try file.saveNow(record(2)) { if $0 == step { throw SimulatedCrash() } }
        }
        let loaded = try file.load()
        let renamed = [AtomicFile.Step.renamed, .syncedDirectory].contains(step)
        #expect(loaded == record(renamed ? 2 : 1))
        // The next write succeeds over a leftover temporary file.
        try file.saveNow(record(3))
        #expect(try file.load() == record(3))
    }

    @Test func corruptFileIsMovedAsideNotOverwritten() throws {
        let file = try StateStore(directory: directory).file(for: "default")
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: file.path))
        do {
            _ = try file.load()
            Issue.record("corrupt file loaded")
        } catch {
            let moved = try #require(error.movedTo)
            #expect(try String(contentsOfFile: moved, encoding: .utf8) == "{ not json")
            #expect(!FileManager.default.fileExists(atPath: file.path))
        }
    }

    @Test func fileOfAnotherSessionIsRefused() throws {
        let store = try StateStore(directory: directory)
        try store.file(for: "a").saveNow(record(1))
        try FileManager.default.copyItem(atPath: store.path(for: "a"), toPath: store.path(for: "b"))
        #expect(throws: StateLoadError.self) { try store.file(for: "b").load() }
    }

    @Test func newerVersionIsLeftInPlace() throws {
        let file = try StateStore(directory: directory).file(for: "default")
        try Data(#"{"format":"tokend-session","version":99,"session":"default","encryption":"none"}"#.utf8)
            .write(to: URL(fileURLWithPath: file.path))
        #expect(throws: StateLoadError.self) { try file.load() }
        #expect(FileManager.default.fileExists(atPath: file.path))
    }
}
