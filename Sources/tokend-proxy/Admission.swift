import Synchronization

/// At most `limit` connections are served at once, whichever loop serves
/// them, and at most `perOwner` of them for one owner (on TCP, the uid of the
/// peer's socket): a connection accepted once either is reached is refused (it
/// gets 503 and is closed, and is not counted). So one local user who holds
/// connections open cannot take every slot from another.
final class Admission: Sendable {
    private let limit: Int
    private let perOwner: Int
    private let open = Atomic(0)
    private let owners = Mutex<[UInt32: Int]>([:])

    init(limit: Int, perOwner: Int? = nil) {
        self.limit = limit
        self.perOwner = perOwner ?? limit
    }

    /// A connection just accepted, of `owner` (nil: not counted per owner): whether it is served (and
    /// counted until `leave`).
    func admit(owner: UInt32? = nil) -> Bool {
        if let owner {
            let taken = owners.withLock { owners in
                guard owners[owner, default: 0] < perOwner else { return false }
                owners[owner, default: 0] += 1
                return true
            }
            guard taken else { return false }
        }
        var current = open.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, found) = open.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        if let owner { release(owner) }
        return false
    }

    /// An admitted connection closed.
    func leave(owner: UInt32? = nil) {
        open.subtract(1, ordering: .relaxed)
        if let owner { release(owner) }
    }

    private func release(_ owner: UInt32) {
        owners.withLock { owners in
            let left = owners[owner, default: 1] - 1
            owners[owner] = left > 0 ? left : nil
        }
    }

    /// Admitted and not yet left.
    var count: Int { open.load(ordering: .relaxed) }

    /// Whether `owner` has all its slots.
    func isFull(owner: UInt32) -> Bool { owners.withLock { $0[owner, default: 0] >= perOwner } }
}
