import Persons
import Synchronization

/// At most `limit` connections are served at once, whichever loop serves
/// them, and at most `perOwner` of them for one person (on TCP, the owner of
/// the peer's socket; the uids of someone's /etc/subuid range are that
/// someone, as on tokend's own socket): a connection accepted once either is
/// reached is refused (it gets 503 and is closed, and is not counted). So one
/// local user who holds connections open, from as many uids as their user
/// namespaces give them, cannot take every slot from another. And the
/// proxy's own person (`own`) keeps a reserve no other person can take, even
/// several together: `perOwner` slots, or `limit - perOwner` if that is fewer.
final class Admission: Sendable {
    private let limit: Int
    private let perOwner: Int
    private let persons: SubordinateIDs
    /// The proxy's own person; nil: no reserve.
    private let own: UInt32?
    /// What other persons may hold together.
    private let forOthers: Int
    private let open = Atomic(0)
    private let owners = Mutex<(counts: [UInt32: Int], others: Int)>(([:], 0))

    init(limit: Int, perOwner: Int? = nil, persons: SubordinateIDs = SubordinateIDs(), own uid: UInt32? = nil) {
        self.limit = limit
        self.perOwner = perOwner ?? limit
        self.persons = persons
        own = uid.map(persons.person(of:))
        forOthers = own == nil ? limit : limit - min(self.perOwner, limit - self.perOwner)
    }

    /// A connection just accepted, of the uid `owner` (nil: not counted per owner): whether it is served
    /// (and counted until `leave`, which is given the same uid).
    func admit(owner uid: UInt32? = nil) -> Bool {
        let owner = uid.map(persons.person(of:))
        if let owner {
            let other = owner != own
            let taken = owners.withLock { owners in
                guard owners.counts[owner, default: 0] < perOwner, !other || owners.others < forOthers else { return false }
                owners.counts[owner, default: 0] += 1
                if other { owners.others += 1 }
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

    /// An admitted connection of the uid `owner` closed.
    func leave(owner uid: UInt32? = nil) {
        open.subtract(1, ordering: .relaxed)
        if let uid { release(persons.person(of: uid)) }
    }

    private func release(_ owner: UInt32) {
        owners.withLock { owners in
            let left = owners.counts[owner, default: 1] - 1
            owners.counts[owner] = left > 0 ? left : nil
            if owner != own { owners.others -= 1 }
        }
    }

    /// Admitted and not yet left.
    var count: Int { open.load(ordering: .relaxed) }

    /// Whether the person of the uid `owner` has all its slots.
    func isFull(owner uid: UInt32) -> Bool { owners.withLock { $0.counts[persons.person(of: uid), default: 0] >= perOwner } }
}
