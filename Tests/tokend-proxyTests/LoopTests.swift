import CLinux
import Foundation
import NIOCore
import Synchronization
import TestSupport
import Testing

@testable import ProxyProgram

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
        // Close-on-exec: a child another test spawns meanwhile must not hold the loop's end open.
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        // The test's end does not block either: a test that blocks in read holds one of the few threads
        // every test's tasks share (`received` waits without holding one).
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

    /// `body`'s result, once the loop has run it.
    func fromLoop<T: Sendable>(_ recorder: Recorder, _ body: @escaping @Sendable (Socket) -> T) async throws -> T {
        let result = Mutex<T?>(nil)
        onLoop(recorder) { socket in
            let value = body(socket)
            result.withLock { $0 = value }
        }
        try await eventually { result.withLock { $0 != nil } }
        return result.withLock { $0! }
    }

    /// What the peer reads until `count` bytes came, or (`count` nil) until the end of the stream.
    static func received(_ peer: CInt, count: Int? = nil, within seconds: Double = 5) async throws -> [UInt8] {
        var received: [UInt8] = []
        var ended = false
        var buffer = [UInt8](repeating: 0, count: 65_536)
        try await eventually(within: seconds) {
            while count.map({ received.count < $0 }) ?? true {
                let got = read(peer, &buffer, buffer.count)
                if got > 0 {
                    received += buffer[0..<got]
                } else if got == 0 {
                    ended = true
                    break
                } else {
                    break  // EAGAIN: nothing more for now
                }
            }
            return ended || count.map { received.count >= $0 } == true
        }
        return received
    }

    /// Bytes the kernel holds unread for `fd`.
    static func unread(_ fd: CInt) -> CInt {
        var count: CInt = 0
        return ioctl(fd, UInt(FIONREAD), &count) == 0 ? count : -1
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
        let received = try await Self.received(peer, count: sent.count)
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
        let received = try await Self.received(peer)
        #expect(received == Array("answer".utf8), "the answer, then the end of the stream")
        // The peer sees the end when the descriptor is closed; the user is told just after, on the loop's thread.
        try await eventually { recorder.state.withLock { $0.closed } }
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
        let served = try await fromLoop(recorder) { $0.fd }
        let paused = Atomic(false)
        onLoop(recorder) { socket in
            socket.reading = false
            paused.store(true, ordering: .sequentiallyConsistent)
        }
        try await eventually { paused.load(ordering: .sequentiallyConsistent) }
        _ = "held".withCString { write(peer, $0, 4) }
        // The bytes are at the loop's end, and the loop has since had its readiness: two turns of the loop
        // after they came (the first may take the readiness in the same wakeup as the task, in either order).
        try await eventually { Self.unread(served) == 4 }
        for _ in 0..<2 { _ = try await fromLoop(recorder) { _ in () } }
        #expect(recorder.state.withLock { $0.bytes.isEmpty }, "nothing read while reading is off")
        #expect(Self.unread(served) == 4, "the bytes wait in the kernel")
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

/// Connecting to the upstream: an address that drops connects costs a quarter second, not the timeout.
@Suite struct DialerTests {
    /// A listener on 127.0.0.1 (port chosen by the kernel) with `backlog`, and its address.
    static func listener(backlog: CInt) throws -> (fd: CInt, address: sockaddr_in) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        _ = withUnsafePointer(to: &address) { bind(fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), 16) }
        try #require(listen(fd, backlog) == 0)
        var length = socklen_t(16)
        _ = withUnsafeMutablePointer(to: &address) { getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length) }
        return (fd, address)
    }

    /// A loopback listener whose backlog is full: the kernel drops further connects (no answer at all).
    static func blackHole() throws -> (listener: CInt, port: Int, fillers: [CInt]) {
        let (listener, bound) = try listener(backlog: 0)
        var address = bound
        var fillers: [CInt] = []
        for _ in 0..<4 {  // more than the backlog takes; the later ones hang, and are not waited for
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            _ = withUnsafePointer(to: &address) { connect(filler, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), 16) }
            fillers.append(filler)
        }
        return (listener, Int(UInt16(bigEndian: address.sin_port)), fillers)
    }

    @Test func anAddressThatDropsConnectsIsPassedOverForTheNextAfterAQuarterSecond() async throws {
        let hole = try Self.blackHole()
        let (open, address) = try Self.listener(backlog: 16)
        defer { ([open, hole.listener] + hole.fillers).forEach { _ = close($0) } }
        let holeAddress = try #require(Dialer.resolve("127.0.0.1", port: hole.port, numeric: true))
        let openAddress = try #require(Dialer.resolve("127.0.0.1", port: Int(UInt16(bigEndian: address.sin_port)), numeric: true))
        // The black hole holds a connect: alone, it times out.
        let dialer = Dialer(host: "127.0.0.1", port: 0, tls: nil, timeout: .seconds(1))
        let outcome = Mutex<String?>(nil)
        let loop = LoopTests.loop
        let started = ContinuousClock.now
        loop.execute {
            dialer.connect(to: holeAddress, on: loop) { result in
                outcome.withLock { $0 = (try? result.get()).map { _ in "connected" } ?? "\(result)" }
            }
        }
        try await eventually(within: 5) { outcome.withLock { $0 != nil } }
        #expect(outcome.withLock { $0 ?? "" }.contains("timed out"), "the black hole really drops connects")
        #expect(ContinuousClock.now - started >= .milliseconds(900))
        // With a good address after it, the good one is connected a quarter second in, not at the
        // timeout (a long one here, so that a slow machine cannot turn the first into the second).
        let patient = Dialer(host: "127.0.0.1", port: 0, tls: nil, timeout: .seconds(20))
        outcome.withLock { $0 = nil }
        let second = ContinuousClock.now
        let elapsed = Mutex<Duration?>(nil)
        loop.execute {
            patient.connect(to: holeAddress + openAddress, on: loop) { result in
                elapsed.withLock { $0 = ContinuousClock.now - second }
                outcome.withLock { $0 = (try? result.get()).map { socket in socket.close(error: nil); return "connected" } ?? "\(result)" }
            }
        }
        try await eventually(within: 15) { outcome.withLock { $0 != nil } }
        #expect(outcome.withLock { $0 } == "connected")
        let took = try #require(elapsed.withLock { $0 })
        #expect(took >= .milliseconds(240) && took < .seconds(10), "\(took)")
    }
}
