#if canImport(Glibc)
import Glibc
#endif

/// Which system call a lane's thread sleeps in, from the kernel: a close
/// counts as stuck only while its thread sleeps in close(2), not while the
/// scheduler has yet to run it or it has yet to get there.
extension DescriptorCloser {
    /// close(2)'s number (asm/unistd.h; Swift's Glibc module leaves out
    /// SYS_close). Elsewhere nil: the clock alone decides.
    #if arch(x86_64)
    static let closeCall: Int? = 3
    #elseif arch(arm64)
    static let closeCall: Int? = 57
    #else
    static let closeCall: Int? = nil
    #endif

    /// The calling thread's id, from /proc/thread-self ("PID/task/TID");
    /// nil without /proc. (Swift's Glibc module leaves out gettid.)
    static func currentThread() -> pid_t? {
        var link = [UInt8](repeating: 0, count: 64)
        let count = link.withUnsafeMutableBufferPointer { link in
            link.withMemoryRebound(to: CChar.self) { readlink("/proc/thread-self", $0.baseAddress!, $0.count) }
        }
        guard count > 0, count < link.count else { return nil }
        return String(decoding: link[..<count], as: UTF8.self).split(separator: "/").last.flatMap { pid_t($0) }
    }

    /// Whether thread `thread` of this process sleeps in close(2); nil where
    /// /proc cannot say.
    static func asleepInClose(_ thread: pid_t) -> Bool? {
        guard let closeCall else { return nil }
        let fd = open("/proc/self/task/\(thread)/syscall", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var line = [UInt8](repeating: 0, count: 32)
        let count = read(fd, &line, line.count)
        guard count > 0 else { return nil }
        return asleep(in: closeCall, line: String(decoding: line[..<count], as: UTF8.self))
    }

    /// The kernel's line (proc(5), /proc/PID/syscall): "running" for a thread
    /// on a CPU or waiting for one, "-1 SP PC" for one asleep outside a system
    /// call, "NR ARGS… SP PC" for one asleep in system call NR. Whether it
    /// sleeps in `call`; nil for a line it does not know.
    static func asleep(in call: Int, line: String) -> Bool? {
        guard let first = line.split(whereSeparator: { $0 == " " || $0 == "\n" }).first else { return nil }
        if first == "running" { return false }
        return Int(first).map { $0 == call }
    }
}
