import Foundation
import Testing
import TestSupport
import Varlink

@testable import UnixServer

/// What one connection may hold, over real sockets: nothing of a served call
/// but a small frame, replies bounded before each call is parsed, a write
/// timeout that runs from the last progress, every reply to a client that
/// half-closed. (In ServerLoopTests: tests that block in a socket run one at
/// a time, or they starve the service's tasks of the pool's threads.)
extension ServerLoopTests {
    /// What a connection's buffers and remembered call hold, read on the loop.
    struct Held: Sendable {
        var buffers = 0
        var remembered = 0
        var unwritten = 0
        var scanned = 0
        var examined = 0
    }

    static func held(_ harness: Harness) async throws -> [Held] {
        try await harness.onLoop { loop in
            loop.connections.values.map {
                Held(
                    buffers: $0.unprocessed.capacity + $0.unwritten.capacity,
                    remembered: $0.lastFrame.capacity + ($0.lastCall == nil ? 0 : 1), unwritten: $0.unwritten.count,
                    scanned: $0.scanned, examined: $0.examined)
            }
        }
    }

    @Test func aLargeCallLeavesNothingOnItsConnectionOnceAnswered() async throws {
        let harness = try await Harness(fastReusableFor: .seconds(60))
        let large = String(repeating: "a", count: 900_000)
        var clients: [TestClient] = []
        for index in 0..<10 {
            let client = try harness.client()
            // Half through the service (Echo), half answered by the fast path on the loop.
            let method = index % 2 == 0 ? "org.example.test.Echo" : "org.example.test.Fast"
            client.send(TestClient.frame(method, "{\"text\":\"\(large)\"}"))
            #expect(client.reply()?.error == nil)
            clients.append(client)
        }
        let held = try await Self.held(harness)
        #expect(held.count == 10)
        #expect(held.allSatisfy { $0.buffers == 0 && $0.remembered == 0 }, "\(held)")
        // A small fast call is still remembered, to be answered again without parsing.
        clients[0].send(fast)
        #expect(clients[0].reply()?.parameters["fast"] == true)
        try await eventually { try await Self.held(harness).contains { $0.remembered > 0 } }
        await harness.stop()
    }

    @Test func aClientThatNeverReadsGetsNoMoreThanTheWatermarkQueued() async throws {
        let harness = try await Harness(fastReplyPadding: 1000)
        let client = try harness.smallBufferClient()
        // 64 KiB of calls in one go, about 1,700 replies of 1 KB: the loop
        // stops taking calls once the socket and the watermark are full.
        let calls = String(repeating: fast, count: 65536 / fast.utf8.count)
        client.send(calls)
        let watermark = VarlinkServer.Limits().writeBufferHighWatermark
        try await eventually { try await Self.held(harness).first.map { $0.unwritten >= watermark } == true }
        let held = try #require(try await Self.held(harness).first)
        #expect(held.unwritten < watermark + 1100, "queued \(held.unwritten) bytes")
        await harness.stop()
    }

    @Test func repliesPastTheHardCapCloseTheConnection() async throws {
        var limits = Harness.quickLimits()
        limits.maximumUnwrittenBytes = 256 * 1024
        let harness = try await Harness(limits: limits)
        let member = try harness.smallBufferClient()
        member.send(TestClient.frame("org.example.test.Join", more: true))
        #expect(member.reply()?.parameters["event"]?.stringValue == "joined")
        // A broadcast's replies wait for no one: they pile up for a member that does not read.
        let event = String(repeating: "e", count: 4000)
        for _ in 0..<200 { harness.broadcast.publish(VarlinkReply(parameters: ["event": .string(event)], continues: true)) }
        try await eventually { try await Self.held(harness).isEmpty }
        await harness.stop()
    }

    @Test func aReplyLargerThanTheHardCapReachesAClientThatReadsSlowly() async throws {
        // 6 MiB in one reply (a full cookie jar's export or snapshot), past the 4 MiB cap and budget.
        let harness = try await Harness(fastReplyPadding: 6 << 20)
        let client = try harness.smallBufferClient()
        client.send(fast)
        // The loop has queued it past the cap (its limits are checked as it is queued, in the same turn)
        // and the connection is still there: one that were closed would never hold it.
        let cap = VarlinkServer.Limits().maximumUnwrittenBytes
        try await eventually { try await Self.held(harness).first.map { $0.unwritten > cap } == true }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 256 * 1024)
        while received.last != 0 {
            let count = chunk.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            received += chunk[..<count]
            if received.count % (1 << 20) < count { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(received.last == 0, "the connection ended after \(received.count) bytes")
        let reply = try? VarlinkReply(frame: Array(received.dropLast()))
        #expect(reply?.parameters["padding"]?.stringValue?.count == 6 << 20)
        await harness.stop()
    }

    @Test func broadcastsPilingUpBehindALargeReplyStillCloseAMemberThatNeverReads() async throws {
        var limits = Harness.quickLimits()
        limits.maximumUnwrittenBytes = 256 * 1024
        let harness = try await Harness(limits: limits)
        let member = try harness.smallBufferClient()
        member.send(TestClient.frame("org.example.test.Join", more: true))
        #expect(member.reply()?.parameters["event"]?.stringValue == "joined")
        harness.broadcast.publish(VarlinkReply(parameters: ["event": .string(String(repeating: "s", count: 6 << 20))], continues: true))
        // Queued whole, past the cap, and the connection kept: the large reply alone is no reason to close.
        try await eventually { try await Self.held(harness).first.map { $0.unwritten > limits.maximumUnwrittenBytes } == true }
        #expect(try await Self.held(harness).count == 1, "the large reply alone is no reason to close")
        let event = String(repeating: "e", count: 4000)
        for _ in 0..<200 { harness.broadcast.publish(VarlinkReply(parameters: ["event": .string(event)], continues: true)) }
        try await eventually { try await Self.held(harness).isEmpty }
        await harness.stop()
    }

    @Test func repliesNotReadCountInTheirPersonsBudget() async throws {
        var limits = Harness.quickLimits()
        limits.maximumBufferedBytesPerPerson = 1 << 20
        let harness = try await Harness(limits: limits)
        // Two connections of one person (this process's uid), neither reading.
        let members = try (0..<2).map { _ in try harness.smallBufferClient() }
        for member in members {
            member.send(TestClient.frame("org.example.test.Join", more: true))
            #expect(member.reply()?.parameters["event"]?.stringValue == "joined")
        }
        // 1 MB each: the kernel takes at most about 200 KB, so each holds 0.7 to 1 MB
        // unwritten, under the budget alone and over it together, and under the hard cap.
        let event = String(repeating: "e", count: 4000)
        for _ in 0..<250 { harness.broadcast.publish(VarlinkReply(parameters: ["event": .string(event)], continues: true)) }
        try await eventually { try await Self.held(harness).count == 1 }
        // One more small event, published after the others: once the one left holds it, the loop has
        // handed it every event before it, and the budget has been checked for each.
        let before = try #require(try await Self.held(harness).first).unwritten
        harness.broadcast.publish(VarlinkReply(parameters: ["event": .string("last")], continues: true))
        try await eventually { try await Self.held(harness).first.map { $0.unwritten > before } != false }
        let left = try await Self.held(harness)
        #expect(left.count == 1, "the budget closes the connection that passes it, not both")
        #expect(left.first.map { $0.unwritten > 600_000 } == true, "the one left still holds its replies")
        await harness.stop()
    }

    @Test func theWriteTimeoutRunsFromTheLastWriteThatMadeProgress() async throws {
        var limits = Harness.quickLimits()
        // Two seconds: a reader paused a moment longer on a busy machine is still making progress.
        limits.writeTimeout = .seconds(2)
        let harness = try await Harness(limits: limits, fastReplyPadding: 1000)
        let client = try harness.smallBufferClient()
        client.send(String(repeating: fast, count: 1500))  // 1.5 MB of replies
        // Drained at about 250 KB/s at most: six seconds of backlog, never two without progress.
        var received = 0
        var chunk = [UInt8](repeating: 0, count: 4096)
        let started = ContinuousClock.now
        while received < 1500, ContinuousClock.now - started < .seconds(30) {
            let count = chunk.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            received += chunk[..<count].count { $0 == 0 }
            try await Task.sleep(for: .milliseconds(15))
        }
        #expect(received == 1500, "closed after \(received) replies, \(ContinuousClock.now - started)")
        #expect(ContinuousClock.now - started > .seconds(4), "the backlog outlasted the write timeout twice over")
        await harness.stop()
    }

    @Test func aClientThatHalfClosesGetsEveryReply() async throws {
        let harness = try await Harness(fastReplyPadding: 1000)
        let client = try harness.client()
        let echo = TestClient.frame("org.example.test.Echo", "{\"text\":\"last\"}")
        client.send(String(repeating: fast, count: 500) + TestClient.frame("org.example.test.Wait", "{\"ms\":50}") + echo)
        shutdown(client.fd, Int32(SHUT_WR))
        for _ in 0..<500 { #expect(client.reply()?.parameters["fast"] == true) }
        #expect(client.reply()?.parameters["waited"]?.intValue == 50)
        #expect(client.reply()?.parameters["text"]?.stringValue == "last")
        #expect(client.closedByServer())
        await harness.stop()
    }

    @Test func aMessageArrivingInPiecesIsSearchedOnce() async throws {
        let harness = try await Harness()
        let client = try harness.client()
        let frame = Array(TestClient.frame("org.example.test.Echo", "{\"text\":\"\(String(repeating: "b", count: 20000))\"}").utf8)
        var sent = 0
        for end in stride(from: 4000, to: frame.count - 1, by: 4000) {
            client.send(Array(frame[sent..<end]))
            sent = end
            try await eventually { try await Self.held(harness).first?.scanned == sent }
        }
        client.send(Array(frame[sent...]))
        #expect(client.reply()?.parameters["text"]?.stringValue?.count == 20000)
        // Searched from the start on each read, it would have examined about three times as much.
        let examined = try await Self.held(harness).first?.examined
        #expect(examined == frame.count, "examined \(examined ?? -1) bytes of a \(frame.count)-byte message")
        await harness.stop()
    }

    @Test func aReuseDeadlineFarInTheFutureDoesNotTrap() async throws {
        let harness = try await Harness(fastReusableFor: .seconds(Int64.max / 2))
        let client = try harness.client()
        for _ in 0..<3 { client.send(fast) }
        for _ in 0..<3 { #expect(client.reply()?.parameters["fast"] == true) }
        #expect(harness.fast.calls.load(ordering: .relaxed) == 1)
        #expect(Duration.seconds(Int64.max / 2).nanoseconds == .max)
        #expect(Duration.seconds(-Int64.max / 2).nanoseconds == .min)
        await harness.stop()
    }
}
