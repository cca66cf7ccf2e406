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
}
