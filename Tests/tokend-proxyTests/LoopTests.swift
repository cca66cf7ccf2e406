import Foundation
import NIOCore
import Synchronization
import TestSupport
import Testing

@testable import tokend_proxy

#if canImport(Glibc)
import Glibc
#endif

/// The proxy's loop over real sockets: a socket pair, one end served by a loop, the other driven by the test.
@Suite struct LoopTests {
    /// What a socket told its user, noted for the test to read from its own thread.
    final class Recorder: SocketUser, @unchecked Sendable {
        let state = Mutex((bytes: [UInt8](), writabilityChanges: [Bool](), inputClosed: false, closed: false))
        var socket: Socket?

        func socketRead(_ bytes: ByteBuffer) { state.withLock { $0.bytes += bytes.readableBytesView } }
        func socketReadComplete() {}
        func socketWritabilityChanged() {
            let writable = socket?.isWritable ?? false
            state.withLock { $0.writabilityChanges.append(writable) }
        }
        func socketInputClosed() { state.withLock { $0.inputClosed = true } }
        func socketClosed(error: (any Error)?) { state.withLock { $0.closed = true } }
    }

    static let loop = try! ProxyLoop.start(count: 1)[0]

    /// One end of a new socket pair served by the loop (with `halfClosure`), and the other end.
    func pair(halfClosure: Bool) throws -> (Recorder, peer: CInt) {
        var fds: [CInt] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        _ = fcntl(fds[1], F_SETFL, 0)  // the test's end blocks
        let recorder = Recorder()
        let loop = Self.loop
        let served = fds[0]
        let bound = LoopBound(recorder, on: loop)
        loop.execute {
            let socket = Socket(fd: served, on: loop, halfClosure: halfClosure)
            bound.value.socket = socket
            socket.user = bound.value
            try! loop.register(socket)
        }
        return (recorder, fds[1])
    }

    func onLoop(_ recorder: Recorder, _ body: @escaping @Sendable (Socket) -> Void) {
        let bound = LoopBound(recorder, on: Self.loop)
        Self.loop.execute { body(bound.value.socket!) }
    }

    @Test func aPeerThatDoesNotReadTurnsTheSocketUnwritableAndReadingTurnsItBack() async throws {
        let (recorder, peer) = try pair(halfClosure: true)
        defer { close(peer) }
        let sent = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        onLoop(recorder) { socket in
            var offset = 0
            while offset < sent.count {  // in pieces, as answers go
                socket.write(ByteBuffer(bytes: sent[offset..<min(sent.count, offset + 16_384)]))
                offset += 16_384
            }
            socket.flush()
        }
        try await eventually { recorder.state.withLock { $0.writabilityChanges == [false] } }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while received.count < sent.count {
            let count = read(peer, &buffer, buffer.count)
            try #require(count > 0)
            received += buffer[0..<count]
        }
        #expect(received == sent, "every byte, in order")
        try await eventually { recorder.state.withLock { $0.writabilityChanges == [false, true] } }
    }

    @Test func aHalfCloseIsToldAndAnswersStillGoOutThenTheSocketCloses() async throws {
        let (recorder, peer) = try pair(halfClosure: true)
        defer { close(peer) }
        _ = "request".withCString { write(peer, $0, 7) }
        shutdown(peer, Int32(SHUT_WR))
        try await eventually { recorder.state.withLock { $0.bytes == Array("request".utf8) && $0.inputClosed } }
        onLoop(recorder) { socket in
            socket.write(ByteBuffer(string: "answer"))
            socket.closeAfterWriting()
        }
        var buffer = [UInt8](repeating: 0, count: 64)
        var received: [UInt8] = []
        while true {
            let count = read(peer, &buffer, buffer.count)
            if count <= 0 { break }
            received += buffer[0..<count]
        }
        #expect(received == Array("answer".utf8), "the answer, then the end of the stream")
        #expect(recorder.state.withLock { $0.closed })
    }

    @Test func withoutHalfClosureThePeersEndClosesTheSocket() async throws {
        let (recorder, peer) = try pair(halfClosure: false)
        shutdown(peer, Int32(SHUT_WR))
        try await eventually { recorder.state.withLock { $0.closed && !$0.inputClosed } }
        close(peer)
    }

    @Test func readingTurnedOffLeavesBytesInTheKernelUntilItIsTurnedOn() async throws {
        let (recorder, peer) = try pair(halfClosure: true)
        defer { close(peer) }
        let paused = Atomic(false)
        onLoop(recorder) { socket in
            socket.reading = false
            paused.store(true, ordering: .sequentiallyConsistent)
        }
        try await eventually { paused.load(ordering: .sequentiallyConsistent) }
        _ = "held".withCString { write(peer, $0, 4) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(recorder.state.withLock { $0.bytes.isEmpty }, "nothing read while reading is off")
        onLoop(recorder) { socket in socket.reading = true }
        try await eventually { recorder.state.withLock { $0.bytes == Array("held".utf8) } }
    }

    @Test func timersFireInDeadlineOrderAndACancelledOneNever() {
        var heap = TimerHeap()
        var fired: [Int] = []
        for (deadline, name) in [(30, 3), (10, 1), (20, 2), (15, 9), (40, 4)] {
            let id = heap.add(at: UInt64(deadline)) { fired.append(name) }
            if name == 9 { heap.cancel(id) }
        }
        #expect(heap.next() == 10)
        while let action = heap.takeDue(now: 35) { action() }
        #expect(fired == [1, 2, 3])
        #expect(heap.next() == 40)
    }
}
