import Synchronization

/// At most `limit` connections are served at once, whichever loop serves
/// them: a connection accepted once the limit is reached is refused (it gets
/// 503 and is closed, and is not counted).
final class Admission: Sendable {
    private let limit: Int
    private let open = Atomic(0)

    init(limit: Int) { self.limit = limit }

    /// A connection just accepted: whether it is served (and counted until `leave`).
    func admit() -> Bool {
        var current = open.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, found) = open.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        return false
    }

    /// An admitted connection closed.
    func leave() { open.subtract(1, ordering: .relaxed) }
}
