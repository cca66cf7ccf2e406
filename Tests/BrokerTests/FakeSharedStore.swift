import StateStore
import Synchronization
@testable import Broker

/// A fleet's shared copy in memory. The test plays the other hosts: it takes
/// the fleet lock, writes copies (which the session hears of at once, as a
/// notification) and releases the lock, in the order it chooses.
final class FakeSharedStore: SharedStore {
    private struct State {
        var copy: SharedRecord?
        var locked = false
        var lockWaiters: [CheckedContinuation<Void, Never>] = []
        var watchers: [AsyncStream<SharedStoreEvent>.Continuation] = []
        var writes = 0
    }
    private let state = Mutex(State())
    let hostID = "[tokend] this-host"

    /// Hosts waiting for the fleet lock on this host (the session's refreshes).
    var waitingForLock: Int { state.withLock { $0.lockWaiters.count } }
    /// The fleet's copy as it is now.
    var copy: SharedRecord? { state.withLock { $0.copy } }
    /// Writes this host made.
    var writes: Int { state.withLock { $0.writes } }

    /// Another host takes the fleet lock (it must be free).
    func otherHostLocks() {
        state.withLock { s in
            precondition(!s.locked, "the fleet lock is taken")
            s.locked = true
        }
    }

    /// Another host writes `record` as the fleet's copy; watchers hear of it.
    func otherHostWrites(_ record: SessionRecord) {
        let (copy, watchers) = state.withLock { s in
            let copy = SharedRecord(version: (s.copy?.version ?? 0) + 1, record: record, writtenBy: "[tokend] other-host")
            s.copy = copy
            return (copy, s.watchers)
        }
        for watcher in watchers { watcher.yield(.current(copy)) }
    }

    /// The other host releases the fleet lock: the next waiter takes it.
    func otherHostReleases() { unlock() }

    private func unlock() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard !s.lockWaiters.isEmpty else {
                s.locked = false
                return nil
            }
            return s.lockWaiters.removeFirst()
        }
        next?.resume()
    }

    func lock() async throws -> any SharedLease {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let free = state.withLock { s -> Bool in
                guard s.locked else {
                    s.locked = true
                    return true
                }
                s.lockWaiters.append(continuation)
                return false
            }
            if free { continuation.resume() }
        }
        return Lease(store: self)
    }

    func watch(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async {
        let (stream, continuation) = AsyncStream<SharedStoreEvent>.makeStream()
        let copy = state.withLock { s in
            s.watchers.append(continuation)
            return s.copy
        }
        continuation.yield(.current(copy))
        for await event in stream {
            if Task.isCancelled { return }
            await handle(event)
        }
    }

    func close() async {
        for watcher in state.withLock({ $0.watchers }) { watcher.finish() }
    }

    fileprivate func write(_ record: SessionRecord, expected: Int64?) -> Int64? {
        state.withLock { s in
            guard s.copy?.version == expected else { return nil }
            let version = (s.copy?.version ?? 0) + 1
            s.copy = SharedRecord(version: version, record: record, writtenBy: hostID)
            s.writes += 1
            return version
        }
    }

    private struct Lease: SharedLease {
        let store: FakeSharedStore
        func read() async throws -> SharedRecord? { store.copy }
        func write(_ record: SessionRecord, expected: Int64?) async throws -> Int64? {
            store.write(record, expected: expected)
        }
        func release() async { store.unlock() }
    }
}
