import Foundation
import Logging
import Synchronization
import Varlink

@testable import UnixServer

/// A VarlinkServer on a temporary socket with a small test interface:
/// Echo and Wait (plain calls through the service), Count and Watch
/// (streams), and Fast (answered by the fast path on the loop).
final class Harness: Sendable {
    let path: String
    let task: Task<Void, Error>
    /// Events for Watch subscribers, and what became of each delivery.
    let publisher = Publisher()
    /// Members of Join calls: held by the loop, no task each.
    let broadcast = Broadcast()
    /// How often the fast path was asked, and the stamp it answers under.
    let fast = FastCounters()
    let server: VarlinkServer

    static let interface = try! VarlinkInterface(description: """
        interface org.example.test
        method Echo(text: string) -> (text: string)
        method Wait(ms: int) -> (waited: int)
        method Count(to: int) -> (n: int)
        method Watch() -> (event: string)
        method Join() -> (event: string)
        method Fast() -> (fast: bool)
        """)

    init(
        limits: VarlinkServer.Limits = Harness.quickLimits(), admission: VarlinkServer.Admission? = nil,
        fastReusableFor: Duration = .zero, fastReplyPadding: Int = 0, subordinateIDs: SubordinateIDs = SubordinateIDs()
    ) async throws {
        path = NSTemporaryDirectory() + "unixserver-\(UUID().uuidString.prefix(8)).sock"
        let publisher = self.publisher
        let broadcast = self.broadcast
        let service = VarlinkService(
            info: ServiceInfo(vendor: "test", product: "test", version: "1", url: "u"),
            implementations: [
                VarlinkImplementation(
                    interface: Self.interface,
                    methods: [
                        "Echo": .call { p, _ in ["text": .string(try p.string("text"))] },
                        "Wait": .call { p, _ in
                            let ms = try p.optionalInt("ms") ?? 0
                            try await Task.sleep(for: .milliseconds(ms))
                            return ["waited": .int(ms)]
                        },
                        "Count": .stream { p, _, out in
                            let n = try p.optionalInt("to") ?? 1
                            for i in 1...n { try await out.yield(["n": .int(i)], continues: i < n) }
                        },
                        "Join": .stream { _, _, out in
                            guard broadcast.join(out, first: [VarlinkReply(parameters: ["event": "joined"], continues: true)]) else {
                                throw VarlinkError("org.example.test.NotHeld")
                            }
                        },
                        "Watch": .stream { _, _, out in
                            let events = publisher.subscribe()
                            try await out.yield(["event": "subscribed"], continues: true)
                            for await event in events {
                                do {
                                    try await out.yield(["event": .string(event)], continues: true)
                                    publisher.note(delivered: true)
                                } catch {
                                    publisher.note(delivered: false)
                                    throw error
                                }
                            }
                            publisher.noteEnded()
                        },
                    ])
            ])
        let fastReply: [UInt8] = {
            var bytes: [UInt8] = []
            // Padded to the size of a real token reply where a test needs one.
            var parameters: JSONObject = ["fast": true]
            if fastReplyPadding > 0 { parameters["padding"] = .string(String(repeating: "x", count: fastReplyPadding)) }
            VarlinkReply(parameters: parameters).encode(into: &bytes)
            return bytes
        }()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        server = VarlinkServer(
            service: service, source: .path(path, mode: 0o600), limits: limits, logger: logger,
            oversizedFrameError: VarlinkError("org.example.test.TooLarge"),
            overloadedError: VarlinkError("org.example.test.TooMany"),
            fastPath: { [fast] call, _ in
                guard call.method == "org.example.test.Fast" else { return nil }
                fast.calls.add(1, ordering: .relaxed)
                return .init(bytes: fastReply, reusableFor: fastReusableFor)
            },
            fastPathStamp: { [fast] in fast.stamp.load(ordering: .acquiring) },
            admission: admission, subordinateIDs: subordinateIDs)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let server = self.server
        task = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
    }

    static func quickLimits() -> VarlinkServer.Limits {
        var limits = VarlinkServer.Limits()
        limits.checkInterval = .milliseconds(100)
        return limits
    }

    func client(timeout: Double = 5) throws -> TestClient { try TestClient(path: path, receiveTimeout: timeout) }

    /// A client with a small receive buffer, for tests where it stops reading.
    func smallBufferClient() throws -> TestClient {
        let client = try client()
        var small: CInt = 4096
        setsockopt(client.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<CInt>.size))
        return client
    }

    /// Test builds: `body` runs on the loop's thread, between events.
    func onLoop<T: Sendable>(_ body: @escaping @Sendable (ServerLoop) -> T) async throws -> T {
        guard let loop = server.running.loop.withLock({ $0 }) else { throw TestFailure("no loop") }
        return try await loop.inspectForTesting(body)
    }

    func stop() async {
        task.cancel()
        _ = try? await task.value
        unlink(path)
    }
}

final class FastCounters: Sendable {
    let calls = Atomic(0)
    let stamp = Atomic<UInt64>(0)
}

/// Hands events to every Watch subscriber and counts how their deliveries went.
final class Publisher: Sendable {
    private struct State {
        var subscribers: [AsyncStream<String>.Continuation] = []
        var delivered = 0
        var failed = 0
        var ended = 0
    }
    private let state = Mutex(State())

    func subscribe() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        state.withLock { $0.subscribers.append(continuation) }
        return stream
    }

    func publish(_ event: String) {
        for subscriber in state.withLock({ $0.subscribers }) { subscriber.yield(event) }
    }

    func note(delivered: Bool) {
        state.withLock { delivered ? ($0.delivered += 1) : ($0.failed += 1) }
    }

    /// A Watch handler's event loop ended (cancelled when its connection closed).
    func noteEnded() {
        state.withLock { $0.ended += 1 }
    }

    var outcomes: (delivered: Int, failed: Int, ended: Int) { state.withLock { ($0.delivered, $0.failed, $0.ended) } }
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }
}
