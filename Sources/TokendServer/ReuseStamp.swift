import Synchronization

/// Says when an answer the server loop gives again (`FastReply.reusableFor`)
/// may no longer hold: a session's token changed, or the access rules did.
/// The sessions and the reload call `changed()`; the loop compares `value`
/// before each reuse. (The reuse window itself runs on CLOCK_BOOTTIME in the
/// loop, so a suspend also ends it.)
final class ReuseStamp: Sendable {
    private let changes = Atomic<UInt64>(0)

    func changed() {
        changes.add(1, ordering: .acquiringAndReleasing)
    }

    /// Equal values: nothing has changed in between.
    var value: UInt64 { changes.load(ordering: .acquiring) }
}
