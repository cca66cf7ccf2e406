import Foundation
import Glibc
import Testing

@testable import TokenctlProgram

/// The doctor's programs run as Foundation's Process ran them: the same output, status and
/// surroundings (standard input /dev/null, a process group of their own, no other descriptor).
@Suite struct ChildProcessTests {
    func foundation(_ path: String, _ arguments: [String]) -> (status: Int32, output: String, errors: String)? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let (output, errors) = (Pipe(), Pipe())
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        // Standard error is read on another thread while standard output is read here, as the doctor did.
        nonisolated(unsafe) var errorData = Data()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            errorData = errors.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        done.wait()
        return (process.terminationStatus, String(decoding: outputData, as: UTF8.self), String(decoding: errorData, as: UTF8.self))
    }

    /// The same script under both; `$$`'s process group and the descriptors it holds are printed
    /// relative to itself, so the two runs print the same.
    @Test(arguments: [
        "echo out; echo err >&2; exit 3",
        "printf 'no newline'",
        "cat; echo \"stdin gave $?\"",
        "read line; echo \"read: $?\"",
        "[ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] && echo own-group || echo shared-group",
        "readlink /proc/$$/fd/0",
        "kill -KILL $$",
        "head -c 200000 /dev/zero | tr '\\0' x; head -c 200000 /dev/zero | tr '\\0' y >&2",
        "exit 255",
    ])
    func runsAsFoundation(_ script: String) throws {
        let program = DoctorProgram(path: "/bin/sh")
        let ours = try #require(program.run(["-c", script]))
        let theirs = try #require(foundation("/bin/sh", ["-c", script]))
        #expect(ours.status == theirs.status)
        #expect(ours.standardOutput == theirs.output)
        #expect(ours.standardError == theirs.errors)
    }

    /// A descriptor of tokenctl's that is not close-on-exec is closed in the program, as Foundation closed it.
    @Test func theProgramHoldsNoOtherDescriptor() throws {
        let held = open("/dev/null", O_RDONLY)
        defer { close(held) }
        let script = "[ -e /proc/self/fd/\(held) ] && echo open || echo closed"
        let ours = try #require(DoctorProgram(path: "/bin/sh").run(["-c", script]))
        let theirs = try #require(foundation("/bin/sh", ["-c", script]))
        #expect(ours.standardOutput == "closed\n")
        #expect(ours.standardOutput == theirs.output)
    }

    /// Started from a task (a libdispatch thread, every asynchronous signal blocked) with SIGINT and
    /// SIGTERM ignored, as `tokenctl login` and the agent have them: the program gets none blocked and
    /// none ignored, as from a shell. Foundation's Process passed both on (its issue 4772).
    @Test func theProgramGetsNoBlockedOrIgnoredSignal() async throws {
        let before = (signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN))
        defer {
            signal(SIGINT, before.0)
            signal(SIGTERM, before.1)
        }
        var mask = sigset_t()
        pthread_sigmask(SIG_SETMASK, nil, &mask)
        let script = "grep -E '^Sig(Blk|Ign):' /proc/self/status"
        let ours = try #require(DoctorProgram(path: "/bin/sh").run(["-c", script]))
        // Hexadecimal masks, bit N-1 for signal N; of the ignored ones only the standard signals count
        // (glibc's posix_spawn ignores its own two internal real-time signals, 32 and 33, in the child).
        var masks: [String: UInt64] = [:]
        for line in ours.standardOutput.split(separator: "\n") {
            let fields = line.split(separator: "\t")
            if fields.count == 2, let value = UInt64(fields[1], radix: 16) { masks[String(fields[0])] = value }
        }
        let blocked = sigismember(&mask, SIGTERM) == 1
        #expect(masks["SigBlk:"] == 0, "\(ours.standardOutput) (this thread blocked SIGTERM: \(blocked))")
        #expect(masks["SigIgn:"].map { $0 & 0x7fff_ffff } == 0, "\(ours.standardOutput)")
        // So a SIGTERM ends it (under Foundation's Process the shell lived on: status 0, "lived").
        let ended = try #require(DoctorProgram(path: "/bin/sh").run(["-c", "kill -TERM $$; echo lived"]))
        #expect(ended.status == SIGTERM && ended.standardOutput == "", "\(ended.status) \(ended.standardOutput)")
    }

    @Test func theEnvironmentIsTheOneGiven() throws {
        let ours = try #require(DoctorProgram(path: "/usr/bin/env").run([], environment: ["A": "1", "LANG": "C"]))
        #expect(Set(ours.standardOutput.split(separator: "\n")) == ["A=1", "LANG=C"])
        let inherited = try #require(DoctorProgram(path: "/usr/bin/env").run([]))
        #expect(inherited.standardOutput.contains("PATH="))
    }

    @Test(arguments: ["/nonexistent/program", "/etc/passwd", "/tmp"])
    func whatCannotRunIsNil(_ path: String) {
        #expect(DoctorProgram(path: path).run([]) == nil)
        #expect(foundation(path, []) == nil)
    }
}
