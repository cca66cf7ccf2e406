#if canImport(Glibc)
import Glibc
#endif

/// Another program, started the way Foundation's `Process` started it on Linux: posix_spawn with
/// the path itself as argv[0], in a process group of its own (a Ctrl-C meant for tokenctl is not
/// its), standard input /dev/null, standard output and error captured in pipes or /dev/null, and no
/// other descriptor of tokenctl's open in it. Unlike `Process`, its signals are as a program
/// started from a shell has them (`ProgramSignals`).
struct ChildProcess {
    let pid: pid_t
    /// The read ends of its standard output and error, when they are captured.
    private let pipes: (output: Int32, errors: Int32)?

    /// Everything it wrote and how it ended: its exit status, or the signal that ended it.
    struct Outcome {
        var status: Int32
        var output: [UInt8]
        var errors: [UInt8]
    }

    /// nil when it cannot be started (no such file, not executable). `environment` nil: tokenctl's own.
    static func start(_ path: String, arguments: [String], environment: [String: String]? = nil, capture: Bool)
        -> ChildProcess?
    {
        var output: [Int32] = [-1, -1]
        var errors: [Int32] = [-1, -1]
        if capture {
            guard pipe(&output) == 0 else { return nil }
            guard pipe(&errors) == 0 else {
                output.forEach { _ = close($0) }
                return nil
            }
            for fd in output + errors { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDWR, 0)
        posix_spawn_file_actions_adddup2(&actions, capture ? output[1] : 0, 1)
        posix_spawn_file_actions_adddup2(&actions, capture ? errors[1] : 0, 2)
        // What posix_spawn_file_actions_addclosefrom_np(3) would do, which Swift's Glibc leaves out.
        for fd in openDescriptors() where fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawnattr_setpgroup(&attributes, 0)
        var none = ProgramSignals.none
        var every = ProgramSignals.every
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &every)

        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            argv.forEach { free($0) }
            envp?.forEach { free($0) }
        }
        var pid = pid_t()
        let spawned = envp.map { posix_spawn(&pid, path, &actions, &attributes, argv, $0) }
            ?? posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        if capture {
            _ = close(output[1])
            _ = close(errors[1])
        }
        guard spawned == 0 else {
            if capture {
                _ = close(output[0])
                _ = close(errors[0])
            }
            return nil
        }
        return ChildProcess(pid: pid, pipes: capture ? (output[0], errors[0]) : nil)
    }

    /// Reads standard output and error to their ends, both at once (a long answer on one never
    /// blocks the program on a full pipe), then waits for it to end.
    func finish() -> Outcome {
        var outcome = Outcome(status: 0, output: [], errors: [])
        if let pipes {
            var open = [pollfd(fd: pipes.output, events: Int16(POLLIN), revents: 0),
                        pollfd(fd: pipes.errors, events: Int16(POLLIN), revents: 0)]
            var buffer = [UInt8](repeating: 0, count: 65536)
            while open.contains(where: { $0.fd >= 0 }) {
                if poll(&open, nfds_t(open.count), -1) < 0 {
                    if errno == EINTR { continue }
                    break
                }
                for index in open.indices where open[index].fd >= 0 && open[index].revents != 0 {
                    let got = read(open[index].fd, &buffer, buffer.count)
                    if got < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                    if got <= 0 {
                        _ = close(open[index].fd)
                        open[index].fd = -1
                    } else if index == 0 {
                        outcome.output += buffer[..<got]
                    } else {
                        outcome.errors += buffer[..<got]
                    }
                }
            }
        }
        outcome.status = Self.wait(pid)
        return outcome
    }

    /// Waits for it on a thread of its own, so that a program tokenctl does not wait for leaves no zombie.
    func reapWhenItEnds() {
        let pid = pid
        detachThread { _ = ChildProcess.wait(pid) }
    }

    /// This process's open descriptors, from /proc/self/fd.
    private static func openDescriptors() -> [Int32] {
        guard let directory = opendir("/proc/self/fd") else { return [] }
        let own = dirfd(directory)
        var found: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let fd = Int32(name), fd != own { found.append(fd) }
        }
        closedir(directory)
        return found
    }

    /// Its exit status, or the number of the signal that ended it (as `Process.terminationStatus`).
    private static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return -1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }
}

/// The signals a program tokenctl starts or becomes gets: none blocked and every one at its default
/// action, as from a shell. tokenctl's own are not: Swift's tasks run on libdispatch's threads, which
/// block every asynchronous signal, and `tokenctl login` and the agent ignore SIGINT and SIGTERM
/// (they take them from a dispatch source). A mask and ignored signals both outlive exec, so a
/// browser xdg-open started, or the command of `tokenctl exec`, would not end on SIGTERM or Ctrl-C
/// (Foundation's `Process` has the same fault: swift-corelibs-foundation issue 4772).
enum ProgramSignals {
    static var none: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        return set
    }

    /// The standard signals (Linux: 1 to 31; the real-time ones stay as they are).
    static let standard: ClosedRange<Int32> = 1...31

    /// Every signal whose action can be set (not SIGKILL or SIGSTOP).
    static var every: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for number in Self.standard where number != SIGKILL && number != SIGSTOP { sigaddset(&set, number) }
        return set
    }

    /// Before exec: this thread's mask emptied and every signal's action the default.
    static func resetForExec() {
        var empty = none
        pthread_sigmask(SIG_SETMASK, &empty, nil)
        for number in Self.standard where number != SIGKILL && number != SIGSTOP { signal(number, SIG_DFL) }
    }
}
