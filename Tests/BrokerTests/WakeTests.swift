import Foundation
import Logging
import StateStore
import Synchronization
import TestSupport
import Testing
@testable import Broker

extension SessionActor {
    func wake(in seconds: Double, _ action: @escaping @Sendable (SessionActor) async -> Void) -> Task<Void, Never> {
        wake(at: clock.now() + seconds, action)
    }

    /// Ends a sleeping wake's sleep and cancels it in one turn on the session, which it never gives
    /// up: the wake, woken, waits for the session, and gets its turn only after the cancel (what a
    /// reschedule does when it runs between the end of a wake's sleep and the wake's turn).
    func endSleepThenCancel(_ task: Task<Void, Never>, _ clock: TestClock, at time: Double) {
        clock.advance(to: time)
        task.cancel()
    }
}

/// A planned refresh whose plan was replaced after its time came, but before it ran, runs no more
/// (a fleet host that adopted another host's newer token at that moment refreshed it again: one more
/// upstream refresh at the fleet's expiry, seen by bench/fleet_sim.py).
@Suite struct WakeTests {
    let clock = TestClock()
    let session: SessionActor

    init() throws {
        let directory = NSTemporaryDirectory() + "tokend-wake-\(UUID().uuidString.prefix(8))"
        session = SessionActor(
            name: "default", policy: RefreshPolicy(), endpoint: FakeEndpoint(),
            file: try StateStore(directory: directory).file(for: "default"), clock: clock,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    @Test func aWakeCancelledAfterItsSleepDoesNotAct() async throws {
        let acted = Atomic(0)
        let task = await session.wake(in: 1) { _ in acted.add(1, ordering: .relaxed) }
        try await eventually { clock.sleeperCount == 1 }  // the wake asleep
        await session.endSleepThenCancel(task, clock, at: clock.now() + 1)
        await task.value
        #expect(acted.load(ordering: .relaxed) == 0)
    }

    @Test func aWakeNotCancelledActs() async {
        let acted = Atomic(0)
        let task = await session.wake(in: 0) { _ in acted.add(1, ordering: .relaxed) }
        await task.value
        #expect(acted.load(ordering: .relaxed) == 1)
    }
}
