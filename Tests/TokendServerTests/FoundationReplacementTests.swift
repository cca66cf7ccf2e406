import Config
import Foundation
import Testing

@testable import TokendServer

/// TokendServer does without Foundation; a credential file is read as FileHandle read it.
@Suite struct FoundationReplacementTests {
    /// FileHandle's `readToEnd` gave nil for an empty file, which readCredential refused as unreadable.
    @Test(arguments: [0, 1, 4095, 4096, 4097, 100_000]) func readAllAsFileHandle(_ count: Int) throws {
        let path = NSTemporaryDirectory() + "tokend-read-\(UUID().uuidString.prefix(8))"
        let bytes = Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        let foundation = try FileHandle(forReadingFrom: URL(fileURLWithPath: path)).readToEnd()
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        let read = SessionSettings.readAll(fd)
        #expect(read == bytes)
        #expect((read?.isEmpty == false ? read : nil) == foundation)
    }

    @Test func aDirectoryIsNotRead() {
        let fd = open(NSTemporaryDirectory(), O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        #expect(SessionSettings.readAll(fd) == nil)
    }

    /// A user's session is told from tokend.toml's by a "/" where Foundation's `contains` found one.
    @Test(arguments: [
        "", "work", "alice/mcp", "/", "a/", "/a", "a//b", "a/\u{301}", "\u{301}/a", "é/ü", "a\\b", "a∕b", "a／b",
    ])
    func userSessionNamesAsFoundation(_ name: String) {
        #expect(AccessPolicy.isUsers(name) == name.contains("/"))
    }

    /// The standard library's `firstRange(of:)`, which the Accept check and the invalid_client check
    /// use, finds a word where Foundation's `contains` did.
    @Test(arguments: [
        "", "invalid_client", "token endpoint answered HTTP 401 saying: {\"error\":\"invalid_client\"}",
        "invalid_clientx", "xinvalid_client", "invalid_clien", "INVALID_CLIENT", "invalid_client\u{301}",
        "application/openmetrics-text; version=1.0.0", "application/openmetrics-text", "text/plain",
        "application/openmetrics-text\u{301}", "application/openmetrics-tex", "é application/openmetrics-text",
    ])
    func wordsFoundAsFoundation(_ text: String) {
        for word in ["invalid_client", "application/openmetrics-text"] {
            #expect((text.firstRange(of: word) != nil) == text.contains(word), "\(word)")
        }
    }
}
