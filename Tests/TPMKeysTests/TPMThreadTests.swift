import DPoP
import Dispatch
import Synchronization
import TestSupport
import Testing
@testable import TPMKeys

/// The TPM's thread: the session's work before callers' requests, a bounded
/// lane for requests, and work whose caller gave up never run. The chip is a
/// body that holds the thread until the test lets it go.
@Suite struct TPMThreadTests {
    /// A job that holds the thread until `release`.
    final class Hold: Sendable {
        let gate = DispatchSemaphore(value: 0)
        let began = Mutex(false)
        func release() { gate.signal() }
    }

    /// What ran, in order.
    final class Log: Sendable {
        let entries = Mutex<[String]>([])
        func note(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    func occupy(_ thread: TPMThread) async throws -> Hold {
        let hold = Hold()
        Task {
            _ = await thread.run(tcti: "test") { () -> Result<Int, ProofKeyError> in
                hold.began.withLock { $0 = true }
                hold.gate.wait()
                return .success(0)
            }
        }
        try await eventually { hold.began.withLock { $0 } }
        return hold
    }

    @Test func theSessionsWorkGoesBeforeRequestsWaitingLonger() async throws {
        let thread = TPMThread()
        let order = Log()
        let hold = try await occupy(thread)
        var tasks: [Task<Void, Never>] = []
        for index in 0..<3 {
            tasks.append(Task {
                _ = await thread.run(tcti: "test", lane: .requests) { () -> Result<Int, ProofKeyError> in
                    order.note("request \(index)")
                    return .success(index)
                }
            })
            try await eventually { thread.waiting.requests == index + 1 }
        }
        tasks.append(Task {
            _ = await thread.run(tcti: "test", lane: .session) { () -> Result<Int, ProofKeyError> in
                order.note("session")
                return .success(0)
            }
        })
        try await eventually { thread.waiting.session == 1 }
        hold.release()
        for task in tasks { await task.value }
        #expect(order.all == ["session", "request 0", "request 1", "request 2"])
    }

    /// The requests' lane holds what the chip signs in two seconds (150 ms assumed: 13); the next is refused at once.
    @Test func aFullRequestsLaneRefusesAtOnce() async throws {
        let thread = TPMThread()
        let capacity = TPMThread.requestsCapacity(signingTime: thread.signingTime)
        #expect(capacity == 13)
        let hold = try await occupy(thread)
        var tasks: [Task<Result<Int, ProofKeyError>, Never>] = []
        for _ in 0..<capacity {
            tasks.append(Task { await thread.run(tcti: "test", lane: .requests) { .success(1) } })
        }
        try await eventually { thread.waiting.requests == capacity }
        let refused = await thread.run(tcti: "test", lane: .requests) { () -> Result<Int, ProofKeyError> in .success(1) }
        guard case .failure(let error) = refused else {
            Issue.record("a request beyond the lane's capacity was queued")
            hold.release()
            return
        }
        #expect(error.kind == .busy && (error.retryAfter ?? 0) >= 2)
        // The session's own work is never refused for it.
        let session = Task { await thread.run(tcti: "test", lane: .session) { () -> Result<Int, ProofKeyError> in .success(2) } }
        try await eventually { thread.waiting.session == 1 }
        hold.release()
        #expect(try await session.value.get() == 2)
        for task in tasks { #expect(try await task.value.get() == 1) }
    }

    @Test func workWhoseCallerGaveUpNeverReachesTheChip() async throws {
        let thread = TPMThread()
        let ran = Log()
        let hold = try await occupy(thread)
        let abandoned = Task {
            await thread.run(tcti: "test", lane: .requests) { () -> Result<Int, ProofKeyError> in
                ran.note("ran")
                return .success(1)
            }
        }
        try await eventually { thread.waiting.requests == 1 }
        abandoned.cancel()
        let result = await abandoned.value
        #expect(thread.waiting.requests == 0)  // left its lane at once, while the chip was still busy
        hold.release()
        // The thread's next turns find nothing of it.
        _ = await thread.run(tcti: "test") { () -> Result<Int, ProofKeyError> in .success(0) }
        #expect(ran.all.isEmpty)
        guard case .failure(let error) = result else {
            Issue.record("the cancelled job answered \(result)")
            return
        }
        #expect(error.kind == .cancelled && error.saysNothingOfTheKey)
    }

    /// Only signatures are measured; the first replaces the assumed time, later ones move it by a fifth.
    @Test func theSigningTimeIsMeasured() {
        var time = SigningTime()
        #expect(time.time == .milliseconds(150))
        time.observe(.milliseconds(40))
        #expect(time.time == .milliseconds(40))
        time.observe(.milliseconds(40))
        time.observe(.milliseconds(40))
        time.observe(.milliseconds(40))
        time.observe(.milliseconds(40))
        time.observe(.milliseconds(140))
        #expect(time.time == .milliseconds(60))
    }
}
