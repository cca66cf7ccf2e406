import CookieJar
import Foundation
import Secrets
import Testing
@testable import StateStore

@Suite struct EncryptionTests {
    let directory = NSTemporaryDirectory() + "tokend-sealed-\(UUID().uuidString.prefix(8))"
    let key = try! StateKey(bytes: Array(repeating: 7, count: 32), source: "test key")
    let otherKey = try! StateKey(bytes: Array(repeating: 8, count: 32), source: "other key")

    let record = SessionRecord(
        phase: .active, refreshToken: Secret("refresh-SECRET"), accessToken: Secret("access-SECRET"),
        expiresAt: 2000, generation: 4,
        cookies: [
            Cookie(
                name: "sid", value: "cookie-SECRET", domain: "h", hostOnly: true, path: "/", expiresAt: nil,
                secure: false, httpOnly: true, sameSite: nil, creationIndex: 0)
        ], cookieVersion: 1)

    func bytes(_ path: String) -> Data { FileManager.default.contents(atPath: path)! }

    @Test func sealedFilesRoundTripAndHideEverySecret() async throws {
        let file = try StateStore(directory: directory, key: key).file(for: "default")
        try await file.save(record)
        let text = String(decoding: bytes(file.path), as: UTF8.self)
        #expect(!text.contains("SECRET") && text.contains("\"encryption\":\"aes-256-gcm\""))
        #expect(try file.load() == record)
        #expect(try file.prepare() == .sealed)
    }

    @Test func aWrongOrMissingKeyRefusesAndChangesNothing() async throws {
        let file = try StateStore(directory: directory, key: key).file(for: "default")
        try await file.save(record)
        let before = bytes(file.path)
        for store in [try StateStore(directory: directory, key: otherKey), try StateStore(directory: directory)] {
            let reopened = store.file(for: "default")
            #expect {
                try reopened.prepare()
            } throws: { error in
                (error as? StateLoadError)?.refusesStart == true
            }
            #expect(throws: StateLoadError.self) { try reopened.load() }
        }
        #expect(bytes(file.path) == before, "left as it was, not moved aside")
        let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(entries == ["default.session"])
    }

    @Test func aFileCopiedToAnotherSessionDoesNotOpen() async throws {
        let store = try StateStore(directory: directory, key: key)
        try await store.file(for: "alpha").save(record)
        var envelope = try JSONDecoder().decode(Envelope.self, from: bytes(store.path(for: "alpha")))
        envelope.session = "beta"  // an attacker also rewrites the visible name
        try JSONEncoder().encode(envelope).write(to: URL(fileURLWithPath: store.path(for: "beta")))
        #expect {
            try store.file(for: "beta").load()
        } throws: { error in
            (error as? StateLoadError)?.refusesStart == true
        }
    }

    @Test func plainStateIsSealedOnFirstStartWithAKey() async throws {
        try await StateStore(directory: directory).file(for: "default").save(record)
        let file = try StateStore(directory: directory, key: key).file(for: "default")
        #expect(try file.prepare() == .migrated)
        #expect(!String(decoding: bytes(file.path), as: UTF8.self).contains("SECRET"))
        #expect(try file.load() == record)
    }

    @Test func keyFilesAreBase64OrRawAndMustBePrivate() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/key"
        _ = FileManager.default.createFile(
            atPath: path, contents: Data((StateKey.generate() + "\n").utf8), attributes: [.posixPermissions: 0o600])
        #expect(try StateKey(contentsOfFile: path).source == path)
        _ = FileManager.default.createFile(atPath: path, contents: Data(repeating: 1, count: 32), attributes: [.posixPermissions: 0o600])
        _ = try StateKey(contentsOfFile: path)
        chmod(path, 0o644)
        #expect {
            try StateKey(contentsOfFile: path)
        } throws: { error in
            "\(error)".contains("chmod 600")
        }
        _ = FileManager.default.createFile(atPath: path, contents: Data("short".utf8), attributes: [.posixPermissions: 0o600])
        #expect(throws: StateKeyError.self) { try StateKey(contentsOfFile: path) }
        #expect("\(key)" == "<state key from test key>")
    }

    @Test func theCredentialWinsOverTheKeyFile() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: directory + "/tokend.state-key", contents: Data(StateKey.generate().utf8))
        let loaded = try StateKey.load(environment: ["CREDENTIALS_DIRECTORY": directory], keyFile: "/nonexistent")
        #expect(loaded?.source == "credential tokend.state-key")
        #expect(try StateKey.load(environment: [:], keyFile: nil) == nil)
    }
}
