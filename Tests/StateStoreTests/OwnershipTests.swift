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

    func mode(_ path: String) -> mode_t {
        var info = stat()
        lstat(path, &info)
        return info.st_mode & 0o7777
    }

    @Test func aParentOthersMayWriteWithoutTheStickyBitIsRefused() throws {
        #expect(mkdir(directory, 0o700) == 0)
        #expect(chmod(directory, 0o777) == 0)
        let state = directory + "/state"
        let error = #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: state) }
        #expect(error?.path == directory)
        #expect(error?.description.contains("chmod go-w \(directory)") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: state), "nothing made there")
        #expect(chmod(directory, 0o1777) == 0)
        _ = try StateStore(directory: state)
        #expect(mode(state) == 0o700, "a sticky parent, as /tmp, is fine")
    }

    @Test(.enabled(if: geteuid() == 0, "chown to another user needs root"))
    func aParentAnotherUserOwnsIsRefused() throws {
        #expect(mkdir(directory, 0o755) == 0)
        #expect(chown(directory, Self.nobody, Self.nobody) == 0)
        let error = #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: directory + "/state") }
        #expect(error?.path == directory && error?.description.contains("uid 65534") == true)
    }

    @Test(.enabled(if: geteuid() == 0, "chown to another user needs root"))
    func aLinkAnotherUserOwnsIsRefusedAndOneOfTokendsUserIsFollowed() throws {
        #expect(mkdir(directory, 0o755) == 0)
        let real = directory + "/real"
        #expect(mkdir(real, 0o755) == 0)
        let link = directory + "/link"
        #expect(symlink(real, link) == 0)
        #expect(lchown(link, Self.nobody, Self.nobody) == 0)
        let error = #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: link) }
        #expect(error?.path == link && error?.description.contains("symbolic link owned by uid 65534") == true)
        #expect(mode(real) == 0o755, "not chmodded")
        #expect(lchown(link, geteuid(), getegid()) == 0)
        _ = try StateStore(directory: link)
        #expect(mode(real) == 0o700, "tightened through the link tokend's user owns")
        let parentLink = directory + "/up"
        #expect(symlink(directory, parentLink) == 0)
        #expect(lchown(parentLink, Self.nobody, Self.nobody) == 0)
        #expect(throws: UnsafeOwnershipError.self) { try StateStore(directory: parentLink + "/real") }
    }

    @Test func dotSegmentsAreResolvedAsTheKernelDoes() throws {
        // Dot segments resolve to the same checks.
        #expect(mkdir(directory, 0o755) == 0)
        #expect(mkdir(directory + "/x", 0o777) == 0)
        _ = try StateStore(directory: directory + "/./x/../state")
        #expect(mode(directory + "/state") == 0o700)
    }
}
