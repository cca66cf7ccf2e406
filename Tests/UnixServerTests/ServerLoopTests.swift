import Foundation
import Logging
import Testing
import TestSupport
import Varlink

@testable import UnixServer

/// The server loop over a real socket. Serialized: the test client blocks
/// while it reads, and the service's tasks need the pool's other thread.
@Suite(.serialized) struct ServerLoopTests {
    let echo = { (text: String) in TestClient.frame("org.example.test.Echo", "{\"text\":\"\(text)\"}") }
    let fast = TestClient.frame("org.example.test.Fast")

    @Test func repliesKeepTheirOrderAcrossFastServiceAndStreamCalls() async throws {
        let harness = try await Harness()
        let client = try harness.client()
        client.send(
            fast + echo("a") + TestClient.frame("org.example.test.Wait", "{\"ms\":50}")
                + TestClient.frame("org.example.test.Count", "{\"to\":3}", more: true) + fast + echo("b"))
        var seen: [String] = []
        for _ in 0..<8 {
            let reply = try #require(client.reply())
            seen.append(
                reply.parameters["fast"].map { _ in "fast" } ?? reply.parameters["text"]?.stringValue
                    ?? reply.parameters["waited"].map { _ in "waited" } ?? "n\(reply.parameters["n"]?.intValue ?? -1)")
        }
        #expect(seen == ["fast", "a", "waited", "n1", "n2", "n3", "fast", "b"])
        await harness.stop()
    }

    @Test func aConnectionKeepsTheFastPathAfterItsStreamEnds() async throws {
        let harness = try await Harness()
        let client = try harness.client()
        client.send(TestClient.frame("org.example.test.Count", "{\"to\":2}", more: true))
        #expect(client.reply()?.continues == true)
        #expect(client.reply()?.continues == false)
        for _ in 0..<100 { client.send(fast) }
        for _ in 0..<100 { #expect(client.reply()?.parameters["fast"] == true) }
        await harness.stop()
    }

    @Test func aRepeatedFastCallIsAnsweredAgainUntilTheStampChangesOrItsTimeRunsOut() async throws {
        let harness = try await Harness(fastReusableFor: .milliseconds(600))
        let client = try harness.client()
        let ask = { (times: Int) in
            for _ in 0..<times { client.send(self.fast) }
            for _ in 0..<times { #expect(client.reply()?.parameters["fast"] == true) }
        }
        ask(100)
        #expect(harness.fast.calls.load(ordering: .relaxed) == 1, "one answer made, given 100 times")
        harness.fast.stamp.add(1, ordering: .relaxed)  // a token or the rules changed
        ask(10)
        #expect(harness.fast.calls.load(ordering: .relaxed) == 2)
        try await Task.sleep(for: .milliseconds(800))  // the answer's time ran out
        ask(10)
        #expect(harness.fast.calls.load(ordering: .relaxed) == 3)
        client.send(echo("between"))  // another call in between: the next Fast is asked afresh
        #expect(client.reply()?.parameters["text"]?.stringValue == "between")
        ask(1)
        #expect(harness.fast.calls.load(ordering: .relaxed) == 4)
        let other = try harness.client()  // and each connection asks for itself
        other.send(fast)
        #expect(other.reply()?.parameters["fast"] == true)
        #expect(harness.fast.calls.load(ordering: .relaxed) == 5)
        await harness.stop()
    }

    @Test func framesCutAtRandomPointsAreAnsweredInOrder() async throws {
        let harness = try await Harness()
        let client = try harness.client()
        var generator = SystemRandomNumberGenerator()
        let seed = UInt64.random(in: 0..<UInt64.max, using: &generator)
        var random = SplitMix(seed)
        var stream: [UInt8] = []
        var expected: [String] = []
        for index in 0..<200 {
            if random.next() % 2 == 0 {
                stream += Array(fast.utf8)
                expected.append("fast")
            } else {
                stream += Array(echo("e\(index)").utf8)
                expected.append("e\(index)")
            }
        }
        var offset = 0
        while offset < stream.count {
            let length = min(stream.count - offset, Int(random.next() % 97) + 1)
            client.send(Array(stream[offset..<(offset + length)]))
            offset += length
        }
        var seen: [String] = []
        for _ in expected {
            guard let reply = client.reply() else { break }
            seen.append(reply.parameters["fast"] != nil ? "fast" : reply.parameters["text"]?.stringValue ?? "?")
        }
        #expect(seen == expected, "seed \(seed)")
        await harness.stop()
    }

    @Test func anOversizedMessageIsAnsweredAndTheConnectionClosed() async throws {
        var limits = Harness.quickLimits()
        limits.maximumFrameLength = 1024
        let harness = try await Harness(limits: limits)
        let unfinished = try harness.client()
        unfinished.send(String(repeating: "x", count: 2000))
        #expect(unfinished.reply()?.error == "org.example.test.TooLarge")
        #expect(unfinished.closedByServer())
        let complete = try harness.client()
        complete.send(echo(String(repeating: "y", count: 1500)))
        #expect(complete.reply()?.error == "org.example.test.TooLarge")
        #expect(complete.closedByServer())
        let other = try harness.client()
        other.send(fast)
        #expect(other.reply()?.parameters["fast"] == true)
        await harness.stop()
    }

    @Test func aMalformedMessageIsAnsweredAndClosedAndUpgradeIsRefused() async throws {
        let harness = try await Harness()
        let garbage = try harness.client()
        garbage.send("this is not json\0")
        #expect(garbage.reply()?.error == "org.varlink.service.InvalidParameter")
        #expect(garbage.closedByServer())
        let upgrade = try harness.client()
        upgrade.send("{\"method\":\"org.example.test.Echo\",\"parameters\":{\"text\":\"x\"},\"upgrade\":true}\0" + fast)
        let refused = try #require(upgrade.reply())
        #expect(refused.error == "org.varlink.service.InvalidParameter")
        #expect(refused.parameters["parameter"]?.stringValue == "upgrade")
        #expect(upgrade.reply()?.parameters["fast"] == true, "the connection goes on")
        await harness.stop()
    }

    @Test func connectionsOverTheLimitAreAnsweredClosedAndHoldNoSlot() async throws {
        var limits = Harness.quickLimits()
        limits.maximumConnections = 2
        let harness = try await Harness(limits: limits)
        var held = [try harness.client(), try harness.client()]
        for client in held {
            client.send(fast)
            #expect(client.reply() != nil)
        }
        for _ in 0..<50 {
            let extra = try harness.client()
            extra.send(fast)
            #expect(extra.reply()?.error == "org.example.test.TooMany")
            #expect(extra.closedByServer())
        }
        held.removeFirst()  // closes it: its slot is free again
        try await eventually {
            guard let client = try? harness.client() else { return false }
            client.send(self.fast)
            return client.reply()?.parameters["fast"] == true
        }
        await harness.stop()
    }

    @Test func aPeerTheAdmissionCheckTurnsAwayIsAnsweredAndClosed() async throws {
        let harness = try await Harness(admission: { _ in .refused(.permissionDenied) })
        let client = try harness.client()
        #expect(client.reply()?.error == "org.varlink.service.PermissionDenied")
        #expect(client.closedByServer())
        await harness.stop()
    }

    @Test func idleConnectionsAndSlowMessagesAreClosed() async throws {
        var limits = Harness.quickLimits()
        limits.idleTimeout = .milliseconds(300)
        limits.frameTimeout = .milliseconds(400)
        let harness = try await Harness(limits: limits)
        let idle = try harness.client()
        let trickle = try harness.client(timeout: 0.05)
        let subscriber = try harness.client()
        subscriber.send(TestClient.frame("org.example.test.Watch", more: true))
        #expect(subscriber.reply()?.parameters["event"]?.stringValue == "subscribed")
        // One byte every 50 ms never finishes a message: the clock runs from its first byte.
        let started = Date()
        var closed = false
        for byte in Array(String(repeating: "{", count: 100).utf8) {
            trickle.send([byte])
            if trickle.closedByServerWithin() {
                closed = true
                break
            }
        }
        let trickleLasted = Date().timeIntervalSince(started)
        #expect(closed && trickleLasted < 1.5, "closed after \(trickleLasted) s")
        #expect(idle.closedByServer())
        harness.publisher.publish("still here")
        #expect(subscriber.reply()?.parameters["event"]?.stringValue == "still here", "a subscriber is not idle")
        await harness.stop()
    }

    @Test func aSubscriberThatStopsReadingIsClosedAndOthersGoOn() async throws {
        var limits = Harness.quickLimits()
        limits.writeTimeout = .milliseconds(300)
        let harness = try await Harness(limits: limits)
        let stuck = try harness.smallBufferClient()
        let reader = try harness.client()
        for client in [stuck, reader] {
            client.send(TestClient.frame("org.example.test.Watch", more: true))
            #expect(client.reply() != nil)
        }
        let big = String(repeating: "z", count: 16 * 1024)
        for _ in 0..<20 { harness.publisher.publish(big) }
        for _ in 0..<20 { #expect(reader.reply()?.parameters["event"]?.stringValue == big) }
        try await eventually { harness.publisher.outcomes.failed >= 1 }  // the stuck subscriber's delivery failed
        #expect(stuck.closedByServer())
        reader.send(fast)
        harness.publisher.publish("after")
        #expect(reader.reply()?.parameters["event"]?.stringValue == "after")
        await harness.stop()
    }

    @Test func closingASubscribersConnectionEndsItsStream() async throws {
        let harness = try await Harness()
        var client: TestClient? = try harness.client()
        client?.send(TestClient.frame("org.example.test.Watch", more: true))
        #expect(client?.reply() != nil)
        client = nil
        try await eventually { harness.publisher.outcomes.ended == 1 }  // its handler was cancelled with no event
        await harness.stop()
    }

    @Test func aSecondServerDoesNotTakeASocketThatAnswers() async throws {
        let harness = try await Harness()
        #expect(throws: SocketSetupError.self) { _ = try VarlinkServer.listen(path: harness.path, mode: 0o600) }
        let client = try harness.client()
        client.send(fast)
        #expect(client.reply()?.parameters["fast"] == true, "the running server keeps its socket")
        await harness.stop()
    }

    @Test func aListenerWhoseQueueIsFullIsProbedWithoutBlocking() async throws {
        let path = NSTemporaryDirectory() + "unixserver-full-\(UUID().uuidString.prefix(8)).sock"
        defer { unlink(path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        func connectTo(_ fd: CInt) -> Int32 {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
        // Another program listens there, accepts nothing, and its queue is full.
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 0) == 0)
        var queued: [CInt] = []
        defer { for fd in queued { close(fd) } }
        while queued.count < 64 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard connectTo(fd) == 0 else {
                close(fd)
                break
            }
            queued.append(fd)
        }
        // Were the probe to block in connect(2), closing the listener after 5 s frees it.
        let rescue = Task.detached {
            try await Task.sleep(for: .seconds(5))
            close(listener)
        }
        let started = ContinuousClock.now
        let outcome = await Task.detached { Result { try VarlinkServer.listen(path: path, mode: 0o600) } }.value
        let took = ContinuousClock.now - started
        rescue.cancel()
        if (try? await rescue.value) == nil { close(listener) }  // not closed by the rescue
        if case .success(let fd) = outcome { close(fd) }
        #expect(took < .seconds(2), "the probe waited \(took) on a full queue")
        #expect(throws: SocketSetupError.self) { _ = try outcome.get() }
    }
}

extension TestClient {
    /// Closed by the server within the client's receive timeout.
    func closedByServerWithin() -> Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }
}

/// A small seeded generator: a failing cut can be replayed from its seed.
struct SplitMix {
    var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
