import NIOHTTP1
import Synchronization

/// Ends a connection whose client stalls: while the proxy waits for the
/// client's next part (a request head, or the next part of a body), that part
/// must come within the timeout, or the client gets 408 and the connection
/// closes. Time the proxy spends elsewhere (asking tokend, waiting for the
/// upstream to take a chunk) is not the client's.
final class StallWatch: Sendable {
    private struct State {
        var waiting = false
        var deadline = ContinuousClock.now
        var phase = Phase.reading
    }
    private enum Phase { case reading, finished, expired }
    private let state = Mutex(State())
    private let timeout: Duration

    init(timeout: Duration) { self.timeout = timeout }

    /// The client's next request part, or `Stalled` when it did not come in time.
    func next(_ parts: inout Proxy.Parts) async throws -> HTTPServerRequestPart? {
        let expired = state.withLock { state in
            state.waiting = true
            state.deadline = .now + timeout
            return state.phase == .expired
        }
        if expired { throw Stalled() }
        let part = try await parts.next()
        let late = state.withLock { state in
            state.waiting = false
            return state.phase == .expired
        }
        if late { throw Stalled() }
        return part
    }

    /// Until `finish`: once a wait for the client outlasts the timeout, `expire` (which answers 408 and closes).
    func run(expire: () async -> Void) async {
        while true {
            let wake = state.withLock { state -> ContinuousClock.Instant? in
                guard state.phase == .reading else { return nil }
                if !state.waiting { state.deadline = .now + timeout }
                return state.deadline
            }
            guard let wake, (try? await Task.sleep(until: wake, clock: .continuous)) != nil else { return }
            let expired = state.withLock { state in
                guard state.phase == .reading, state.waiting, state.deadline <= .now else { return false }
                state.phase = .expired
                return true
            }
            guard expired else { continue }
            await expire()
            return
        }
    }

    /// The body is read (or the request is over): the watch stops.
    func finish() {
        state.withLock { state in
            if state.phase == .reading { state.phase = .finished }
        }
    }
}

struct Stalled: Error {}
