import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

extension SessionSettings {
    /// Refuses a secret, key or password file that someone other than tokend
    /// could read or change — another user owns it, or users other than
    /// tokend's own (and its group's) may read it — as StateStore refuses
    /// state files others may write: tokend does not start (exit 78),
    /// `--check-config` fails, and a reload keeps the sessions it has. A
    /// systemd credential's copy is private (0400) and passes; `tokenctl
    /// doctor` checks the file it was loaded from.
    func checkCredentialModes() throws(DaemonSetupError) {
        for file in credentialFiles {
            // One that cannot be opened is named by the parser and by endpoint().
            guard let fd = Optional(open(file.path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)), fd >= 0 else {
                continue
            }
            defer { close(fd) }
            try check(file, opened: fd)
        }
    }

    /// The file's contents, read from the very file that was checked: opened
    /// once, judged by what the open descriptor is (fstat), then read from
    /// it — never checked by path and read by path again.
    func readCredential(_ file: CredentialFile) throws(DaemonSetupError) -> Data {
        let fd = open(file.path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else {
            throw DaemonSetupError(
                "session \(name): \(file.key) \(file.path) cannot be read (\(String(cString: strerror(errno))))")
        }
        defer { close(fd) }
        try check(file, opened: fd)
        // An empty file is refused with the words an unreadable one gets.
        guard let data = Self.readAll(fd), !data.isEmpty else {
            throw DaemonSetupError("session \(name): \(file.key) \(file.path) cannot be read")
        }
        return data
    }

    /// Everything left to read from `fd`, nil when a read fails.
    static func readAll(_ fd: CInt) -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return data }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            data.append(contentsOf: buffer[..<count])
        }
    }

    private func check(_ file: CredentialFile, opened fd: CInt) throws(DaemonSetupError) {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw DaemonSetupError("session \(name): \(file.key) \(file.path) cannot be examined")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw DaemonSetupError("session \(name): \(file.key) \(file.path) is not a regular file")
        }
        let me = geteuid()
        guard info.st_uid == me || info.st_uid == 0 else {
            throw DaemonSetupError(
                "session \(name): \(file.key) \(file.path) belongs to uid \(info.st_uid), who can change \(file.holds) "
                    + "or read it; fix: chown \(me == 0 ? "root" : String(me)) \(file.path)")
        }
        let mode = UInt32(info.st_mode) & 0o7777
        if let who = CredentialFile.exposure(mode: mode, group: info.st_gid, ownGroup: getegid()) {
            throw DaemonSetupError(
                "session \(name): \(file.key) \(file.path) is readable by \(who) (mode 0\(String(mode, radix: 8))), "
                    + "so they can read \(file.holds); fix: \(file.fix(ownGroup: getegid()))")
        }
    }
}
