import CSystemd

#if canImport(Glibc)
import Glibc
#endif

/// Keeps secrets out of core dumps and away from same-user debuggers:
/// RLIMIT_CORE=0 and PR_SET_DUMPABLE=0 (which also makes /proc/PID private).
public enum ProcessHardening {
    @discardableResult
    public static func disableCoreDumps() -> Bool {
        var limit = rlimit(rlim_cur: 0, rlim_max: 0)
        let core = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &limit) == 0
        let dumpable = tokend_set_dumpable(0) == 0
        return core && dumpable
    }

    /// Raises the soft limit on open files to the hard limit (one descriptor
    /// per connection); returns the limit in force.
    @discardableResult
    public static func raiseOpenFileLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }
}
