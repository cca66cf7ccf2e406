import Foundation
import Synchronization
import Testing
import TestSupport
import Varlink

@testable import UnixServer

/// A Broadcast's members over a real socket: held by the loop, written to
/// from it, and told apart from the publisher's wait for delivery. In the
/// loop's suite: its tests run one at a time (the test client blocks a thread).
extension ServerLoopTests {
    var join: String { TestClient.frame("org.example.test.Join", more: true) }

    /// Publishes `event` and returns once `delivered` ran (or nil after `seconds`).
    func publish(_ harness: Harness, _ event: String, within seconds: Double = 5) async -> Duration? {
        let done = Mutex<ContinuousClock.Instant?>(nil)
        let start = ContinuousClock.now
        harness.broadcast.publish(VarlinkReply(parameters: ["event": .string(event)], continues: true)) {
            done.withLock { $0 = .now }
        }
        guard (try? await eventually(within: seconds) { done.withLock { $0 } != nil }) != nil else { return nil }
        return done.withLock { $0! } - start
    }

    @Test func membersGetTheirFirstRepliesThenEveryPublishedOne() async throws {
        let harness = try await Harness()
        #expect(await publish(harness, "before anyone") != nil, "with no member, delivered runs at once")
        let clients = try (0..<3).map { _ in try harness.client() }
        for client in clients {
            client.send(join)
            #expect(client.reply()?.parameters["event"]?.stringValue == "joined")
        }
        for event in ["a", "b"] {
            #expect(await publish(harness, event) != nil)
            for client in clients { #expect(client.reply()?.parameters["event"]?.stringValue == event) }
        }
        await harness.stop()
    }

    @Test func finishEndsTheCallsAndTheConnectionsKeepTheFastPath() async throws {
        let harness = try await Harness()
        let client = try harness.client()
        client.send(join)
        #expect(client.reply()?.continues == true)
        client.send(fast)  // waits: a member's connection is not read while its call is open
        harness.broadcast.finish(VarlinkReply(parameters: ["event": "end"], continues: false))
        let last = try #require(client.reply())
        #expect(last.parameters["event"]?.stringValue == "end" && !last.continues)
        #expect(client.reply()?.parameters["fast"] == true)
        for _ in 0..<50 { client.send(fast) }
        for _ in 0..<50 { #expect(client.reply()?.parameters["fast"] == true) }
        client.send(join)  // and it may join again
        #expect(client.reply()?.parameters["event"]?.stringValue == "joined")
        await harness.stop()
    }

    @Test func aMemberThatStopsReadingHoldsDeliveryOnlyUntilItIsClosed() async throws {
        var limits = Harness.quickLimits()
        limits.writeTimeout = .milliseconds(400)
        let harness = try await Harness(limits: limits)
        let stuck = try harness.smallBufferClient()
        let reader = try harness.client()
        for client in [stuck, reader] {
            client.send(join)
            #expect(client.reply() != nil)
        }
        let big = String(repeating: "z", count: 512 * 1024)
        nonisolated(unsafe) let reading = reader  // read on another thread while the loop writes
        let readerDone = Task.detached { reading.reply()?.parameters["event"]?.stringValue == big }
        let waited = try #require(await publish(harness, big))
        #expect(await readerDone.value)
        #expect(waited >= .milliseconds(300), "delivered waited for the stuck member (\(waited))")
        #expect(stuck.closedByServer())
        #expect(await publish(harness, "after") != nil)
        #expect(reader.reply()?.parameters["event"]?.stringValue == "after")
        await harness.stop()
    }

    @Test func aMemberThatHangsUpLeaves() async throws {
        let harness = try await Harness()
        var gone: TestClient? = try harness.client()
        let stays = try harness.client()
        for client in [gone!, stays] {
            client.send(join)
            #expect(client.reply() != nil)
        }
        gone = nil
        #expect(gone == nil)
        #expect(await publish(harness, "x") != nil)
        #expect(stays.reply()?.parameters["event"]?.stringValue == "x")
        await harness.stop()
    }
}
