import Foundation
import Testing
@testable import StateStore

#if canImport(Glibc)
import Glibc
#endif

/// A state directory or file another user owns or may write is refused with
/// the path and the fix; nothing in it is read or chmodded.
@Suite struct OwnershipTests {
    let directory = NSTemporaryDirectory() + "tokend-owner-\(UUID().uuidString.prefix(8))"
    static let nobody: uid_t = 65534

    @Test(.enabled(if: geteuid() == 0, "chown to another user needs root"))
    func directoryOwnedByAnotherUserIsRefusedAndKeepsItsMode() throws {
        #expect(mkdir(directory, 0o755) == 0)
        #expect(chown(directory, Self.nobody, Self.nobody) == 0)
        let error = #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: directory) }
        #expect(error?.description.contains(directory) == true)
        #expect(error?.description.contains("chown root: \(directory)") == true)
        var info = stat()
        stat(directory, &info)
        #expect(info.st_mode & 0o777 == 0o755, "not chmodded")
    }

    @Test(arguments: [0o770, 0o702, 0o777] as [mode_t])
    func groupOrOtherWritableDirectoryIsRefused(_ mode: mode_t) throws {
        #expect(mkdir(directory, 0o700) == 0)
        #expect(chmod(directory, mode) == 0)
        let error = #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: directory) }
        #expect(error?.description.contains("chmod 0700 \(directory)") == true)
    }

    @Test func ownDirectoryWithoutWriteBitsIsTightened() throws {
        #expect(mkdir(directory, 0o755) == 0)
        _ = try StateStore(directory: directory)
        var info = stat()
        stat(directory, &info)
        #expect(info.st_mode & 0o777 == 0o700)
    }

    @Test(.enabled(if: geteuid() == 0, "chown to another user needs root"))
    func stateFileOwnedByAnotherUserIsRefusedAtStartAndLeftAlone() throws {
        let file = try StateStore(directory: directory).file(for: "default")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: file.path))
        chmod(file.path, 0o600)
        #expect(chown(file.path, Self.nobody, Self.nobody) == 0)
        for attempt in [{ _ = try file.prepare() }, { _ = try file.load() }] as [() throws -> Void] {
            let error = #expect(throws: StateLoadError.self) { try attempt() }
            #expect(error?.refusesStart == true)
            #expect(error?.description.contains("chown root: \(file.path)") == true)
        }
        #expect(FileManager.default.fileExists(atPath: file.path), "not moved aside")
    }

    @Test func groupWritableStateFileIsRefused() throws {
        let file = try StateStore(directory: directory).file(for: "default")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: file.path))
        chmod(file.path, 0o660)
        let error = #expect(throws: StateLoadError.self) { try file.load() }
        #expect(error?.description.contains("chmod 0600 \(file.path)") == true)
    }

    @Test func groupWritableTokenFileModeIsRefused() throws {
        let token = TokenFile(path: directory + "/app/token", group: nil, mode: 0o660)
        let error = #expect(throws: UnsafeOwnershipError.self) { try token.write("access") }
        #expect(error?.description.contains("0660") == true)
        #expect(!FileManager.default.fileExists(atPath: token.path))
    }
}
