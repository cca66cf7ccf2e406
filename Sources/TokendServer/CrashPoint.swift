#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

#if TOKEND_TEST_HOOKS
/// Test builds only (TOKEND_TEST_HOOKS=1 at run time too): kills tokend with SIGKILL the
/// TOKEND_CRASH_AFTER-th time (default 1) a refresh reaches the checkpoint
/// TOKEND_CRASH_POINT, e.g. "after-response": between the server's answer
/// and the durable write. Used by the kill -9 campaign.
final class CrashPoint: Sendable {
    let point: String
    let remaining: Mutex<Int>

    init?(environment: [String: String]) {
        guard let point = environment["TOKEND_CRASH_POINT"] else { return nil }
        self.point = point
        remaining = Mutex(Int(environment["TOKEND_CRASH_AFTER"] ?? "1") ?? 1)
    }

    var checkpoint: @Sendable (String) -> Void {
        { name in
            guard name == self.point else { return }
            let due = self.remaining.withLock { count -> Bool in
                count -= 1
                return count == 0
            }
            if due { kill(getpid(), SIGKILL) }
        }
    }
}
#endif
