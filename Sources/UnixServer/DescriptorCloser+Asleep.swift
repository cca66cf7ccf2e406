#if canImport(Glibc)
import Glibc
#endif

/// Whether a lane's thread sleeps, from the kernel: a close counts as stuck
/// only while its thread sleeps in it, not while the scheduler has yet to
/// run it.
extension DescriptorCloser {
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

    /// Whether thread `thread` of this process sleeps; nil where /proc cannot
    /// say. /proc/self/task/TID/stat is readable by the process's own user
    /// even when it is not dumpable (tokend is not: no core dumps), where
    /// /proc/…/syscall and /proc/…/wchan are root's alone.
    static func asleep(_ thread: pid_t) -> Bool? {
        let fd = open("/proc/self/task/\(thread)/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var line = [UInt8](repeating: 0, count: 512)
        let count = read(fd, &line, line.count)
        guard count > 0 else { return nil }
        return asleep(stat: line[..<count])
    }

    /// The kernel's line (proc(5), /proc/PID/stat): "TID (COMM) STATE …",
    /// COMM any bytes, parentheses too, so STATE follows the last ')'. S
    /// (interruptible) and D (uninterruptible) are asleep; R (on a CPU or
    /// waiting for one) and the rest are not. nil for a line it does not know.
    static func asleep(stat line: ArraySlice<UInt8>) -> Bool? {
        guard let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let rest = line[(close + 1)...].drop { $0 == UInt8(ascii: " ") }
        guard let state = rest.first, rest.dropFirst().first == UInt8(ascii: " ") else { return nil }
        switch state {
        case UInt8(ascii: "S"), UInt8(ascii: "D"): return true
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"): return false
        default: return nil
        }
    }
}
