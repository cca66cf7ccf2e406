import Synchronization

/// The bytes of request bodies the proxy keeps in memory (for a retry after a
/// 401), across all connections. A body that does not fit streams through
/// instead, one chunk at a time, as one over `--buffer-limit` does: many
/// connections each sending a body cost at most the budget, however many
/// there are. On a Unix socket every body kept is the proxy's own user's
/// (another user's is dropped as it arrives, then refused), so the budget is theirs.
final class BodyBudget: Sendable {
    private let limit: Int
    private let used = Mutex(0)

    init(limit: Int) { self.limit = limit }

    /// Takes `bytes` from the budget if they fit.
    func take(_ bytes: Int) -> Bool {
        used.withLock { used in
            guard bytes <= limit - used else { return false }
            used += bytes
            return true
        }
    }

    func give(_ bytes: Int) {
        used.withLock { $0 -= bytes }
    }
}
