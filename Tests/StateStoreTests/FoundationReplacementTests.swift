import Foundation
import Testing

@testable import StateStore

/// StateStore does without Foundation; each call that replaced one of Foundation's answers as
/// Foundation did, over well-formed and malformed inputs alike, or (where named) says more.
@Suite struct FoundationReplacementTests {
    @Test(arguments: [
        "", "/", "/a", "/a/", "//a", "/a/b", "/a/b/", "/a/b//", "a/b", "a//b", "/a//b", "./a", "../a", "a/./b",
        "a/../b", "..", "/.", "é/ü", "/var/lib/tokend/alice.json", "/run/tokend/x/token", " /a ", "a/ /b",
    ])
    func directoryAsFoundation(_ path: String) {
        #expect(AtomicFile.directory(of: path) == (path as NSString).deletingLastPathComponent)
    }

    /// Where Foundation's answer was wrong: it trapped (String._startOfLastPathComponent) for a
    /// single name without a slash, which the callers meant to read as "" (the current directory),
    /// and it gave "" for "//", where the directory is the root.
    @Test(arguments: [("a", ""), ("a/", ""), ("a//", ""), (".", ""), ("//", "/"), ("///", "/")])
    func directoryWhereFoundationWasWrong(_ path: String, _ directory: String) {
        #expect(AtomicFile.directory(of: path) == directory)
    }

    struct Envelope: Decodable {
        let format: String
        let version: Int
        let session: [String: Int]?
    }

    /// A file JSONDecoder cannot read is described in the words Foundation's `localizedDescription` used.
    @Test(arguments: [
        "", "{", "nul", "[]", "1", #"{"format":1,"version":1}"#, #"{"format":"x"}"#, #"{"version":1}"#,
        #"{"format":null,"version":1}"#, #"{"format":"x","version":"1"}"#, #"{"format":"x","version":1.5}"#,
        #"{"format":"x","version":1,"session":{"a":"b"}}"#, #"{"format":"x","version":1,"session":{"a":null}}"#,
        #"{"format":"x","version":99999999999999999999}"#, "\u{FEFF}{}", #"{"format":"\ud800","version":1}"#,
    ])
    func decodingProblemAsFoundation(_ text: String) {
        do {
            _ = try JSONDecoder().decode(Envelope.self, from: Data(text.utf8))
            Issue.record("decoded \(text)")
        } catch {
            #expect(decodingProblem(error) == error.localizedDescription)
        }
    }

    /// A token file's directory that cannot be made is named with the reason, as every other step
    /// of a write is; Foundation's CocoaError said "You don’t have permission" whatever the reason.
    @Test func aDirectoryThatCannotBeMadeSaysWhy() throws {
        let base = NSTemporaryDirectory() + "tokend-dir-\(UUID().uuidString.prefix(8))"
        try Data("x".utf8).write(to: URL(fileURLWithPath: base))
        defer { unlink(base) }
        let file = TokenFile(path: base + "/sub/token", group: nil, mode: 0o600)
        #expect(throws: AtomicFile.WriteError.self) { try file.write("t") }
        do {
            try file.write("t")
        } catch {
            #expect("\(error)" == "mkdir \(base)/sub: Not a directory")
        }
    }
}
