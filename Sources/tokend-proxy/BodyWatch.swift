import NIOCore
import NIOHTTP1
import Synchronization

/// Ends a request whose body stalls: while the proxy waits for the client's
/// next part, that part must come within the timeout, or the client gets 408
/// and the connection closes. Time the proxy spends elsewhere (asking tokend,
/// waiting for the upstream to take a chunk) is not the client's.
final class BodyWatch: Sendable {
    private struct State {
        var waiting = false
        var deadline = ContinuousClock.now
        var phase = Phase.reading
    }
    private enum Phase { case reading, finished, expired }
    private let state = Mutex(State())
    private let timeout: Duration

    init(timeout: Duration) { self.timeout = timeout }

    /// The client's next request part, or `BodyStalled` when it did not come in time.
    func next(_ parts: inout Proxy.Parts) async throws -> HTTPServerRequestPart? {
        let expired = state.withLock { state in
            state.waiting = true
            state.deadline = .now + timeout
            return state.phase == .expired
        }
        if expired { throw BodyStalled() }
        let part = try await parts.next()
        let late = state.withLock { state in
            state.waiting = false
            return state.phase == .expired
        }
        if late { throw BodyStalled() }
        return part
    }

    /// Until `finish`: answers 408 and closes the connection once a wait for the client outlasts the timeout.
    func run(on channel: Channel, _ outbound: Proxy.Writer, version: HTTPVersion) async {
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
            let seconds = timeout.components.seconds
            try? await Answer(status: .requestTimeout, message: "the request body stalled for \(seconds) s")
                .write(to: outbound, version: version, close: true)
            try? await channel.close()
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

struct BodyStalled: Error {}
