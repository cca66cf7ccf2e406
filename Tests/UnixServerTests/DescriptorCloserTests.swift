import Synchronization
import Testing
import TestSupport

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// When a person's closes count as stuck: a close whose thread sleeps in
/// close(2) past `stuckAfter` does; a quick close whose thread is held
/// before it for as long (a thread the scheduler does not run on a busy
/// machine, issue 50) does not, whether it waits asleep or runs.
@Suite struct DescriptorCloserTests {
    static let stuckAfter = Duration.milliseconds(200)

    enum Hold: CaseIterable, Sendable {
        /// Asleep, in no close (nanosleep).
        case asleep
        /// On a CPU or waiting for one, as a thread not yet scheduled.
        case running
    }

    @Test(arguments: Hold.allCases)
    func aThreadHeldBeforeAQuickCloseIsNotStuck(_ hold: Hold) async throws {
        let closer = DescriptorCloser(stuckAfter: Self.stuckAfter)
        let reached = Atomic(false)
        let released = Atomic(false)
        closer.beforeClose.withLock {
            $0 = { _ in
                reached.store(true, ordering: .sequentiallyConsistent)
                while !released.load(ordering: .sequentiallyConsistent) {
                    if hold == .asleep { usleep(1000) }
                }
            }
        }
        let (mine, other) = try Self.socketPair()
        defer { Glibc.close(other) }
        closer.close(mine, for: 7)
        try await eventually(within: 30) { reached.load(ordering: .sequentiallyConsistent) }
        // The close in progress began before the hold: once `stuckAfter` has passed since, the
        // clock alone would call it stuck.
        try await Task.sleep(for: Self.stuckAfter * 2)
        #expect(closer.pending(for: 7) == 1)
        #expect(!closer.isStuck(7), "held before its close, not in it")
        #expect(!closer.isStuck(7), "and asked again")
        released.store(true, ordering: .sequentiallyConsistent)
        try await eventually(within: 30) { closer.pending(for: 7) == 0 }
        #expect(!closer.isStuck(7))
        var byte: UInt8 = 0
        #expect(recv(other, &byte, 1, 0) == 0, "the descriptor was closed")
    }

    @Test func aThreadAsleepInALingeringCloseIsStuckAfterStuckAfter() async throws {
        let closer = DescriptorCloser(stuckAfter: Self.stuckAfter)
        let lingering = try Lingering()
        defer { lingering.release() }
        let handed = ContinuousClock.now
        closer.close(try lingering.nested(), for: 9)
        try await eventually(within: 30) { closer.isStuck(9) }
        #expect(ContinuousClock.now - handed >= Self.stuckAfter)
        #expect(closer.isStuck(9), "stuck until its close returns")
        #expect(Self.threadsAsleepInClose() >= 1, "the kernel's word, not only the clock's")
        lingering.release()
        try await eventually(within: 30) { closer.pending(for: 9) == 0 }
        #expect(!closer.isStuck(9))
    }

    @Test func theKernelsLineSaysWhetherAThreadSleepsInClose() {
        #expect(DescriptorCloser.asleep(in: 3, line: "3 0x4 0x0 0x0 0x0 0x7f5d 0x7f5e 0x7f5f 0x7f60\n") == true)
        #expect(DescriptorCloser.asleep(in: 3, line: "running\n") == false)
        #expect(DescriptorCloser.asleep(in: 3, line: "230 0x1 0x1 0x7f5d 0x0 0x0 0x0 0x7f5e 0x7f5f\n") == false)
        #expect(DescriptorCloser.asleep(in: 3, line: "202 0x7f5d 0x80 0x2 0x0 0x0 0x0 0x7f5e 0x7f5f\n") == false)
        #expect(DescriptorCloser.asleep(in: 3, line: "-1 0x7ffc 0x7f3c\n") == false)
        #expect(DescriptorCloser.asleep(in: 57, line: "57 0x4 0x0 0x0 0x0 0x0 0x0 0xffff 0xffff\n") == true)
        #expect(DescriptorCloser.asleep(in: 3, line: "") == nil)
        #expect(DescriptorCloser.asleep(in: 3, line: "what\n") == nil)
    }

    @Test func aThreadKnowsItsId() throws {
        let thread = try #require(DescriptorCloser.currentThread())
        #expect(access("/proc/self/task/\(thread)", F_OK) == 0)
    }

    /// This process's threads asleep in close(2).
    static func threadsAsleepInClose() -> Int {
        guard let directory = opendir("/proc/self/task") else { return 0 }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let thread = pid_t(name), DescriptorCloser.asleepInClose(thread) == true { count += 1 }
        }
        return count
    }

    static func socketPair() throws -> (CInt, CInt) {
        var pair: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw Failed.call("socketpair", errno)
        }
        return (pair[0], pair[1])
    }

    enum Failed: Error { case call(String, CInt) }
}

/// A TCP socket on loopback whose last close sleeps (SO_LINGER on, 60 s, and
/// a send queue its peer never reads), queued in a Unix socket: whoever
/// closes that Unix socket drops it, and sleeps in its close whatever
/// SO_LINGER the Unix socket has (the closer turns it off on what it closes).
final class Lingering {
    let listener: CInt
    let sender: CInt
    let peer: CInt
    private var ended = false

    init() throws {
        let listener = try Self.check("socket", socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0))
        try Self.set(listener, SO_RCVBUF, CInt(4096))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { address in
            try address.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                _ = try Self.check("bind", bind(listener, address, length))
                _ = try Self.check("listen", Glibc.listen(listener, 1))
                _ = try Self.check("getsockname", getsockname(listener, address, &length))
            }
        }
        let sender = try Self.check("socket", socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0))
        try Self.set(sender, SO_SNDBUF, CInt(4096))
        try withUnsafePointer(to: &address) { address in
            try address.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                _ = try Self.check("connect", connect(sender, address, length))
            }
        }
        peer = try Self.check("accept", accept(listener, nil, nil))
        let chunk = [UInt8](repeating: 0x78, count: 65536)
        while send(sender, chunk, chunk.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) > 0 {}
        guard errno == EAGAIN || errno == EWOULDBLOCK else { throw DescriptorCloserTests.Failed.call("send", errno) }
        try Self.set(sender, SO_LINGER, linger(l_onoff: 1, l_linger: 60))
        self.listener = listener
        self.sender = sender
    }

    /// The Unix socket with the lingering one queued in it, its only reference.
    func nested() throws -> CInt {
        let (outer, inner) = try DescriptorCloserTests.socketPair()
        let space = MemoryLayout<cmsghdr>.size + MemoryLayout<CInt>.stride * 2
        let control = UnsafeMutableRawPointer.allocate(byteCount: space + 1, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: space + 1)
        let length = MemoryLayout<cmsghdr>.size + MemoryLayout<CInt>.size
        var header = cmsghdr()
        header.cmsg_len = length
        header.cmsg_level = SOL_SOCKET
        header.cmsg_type = Int32(SCM_RIGHTS)
        control.storeBytes(of: header, as: cmsghdr.self)
        control.storeBytes(of: sender, toByteOffset: MemoryLayout<cmsghdr>.size, as: CInt.self)
        control.storeBytes(of: 0x78, toByteOffset: space, as: UInt8.self)  // the one byte sent
        var vector = iovec(iov_base: control + space, iov_len: 1)
        var message = msghdr()
        let sent = withUnsafeMutablePointer(to: &vector) { vector in
            message.msg_iov = vector
            message.msg_iovlen = 1
            message.msg_control = control
            message.msg_controllen = length
            return sendmsg(outer, &message, Int32(MSG_NOSIGNAL))
        }
        _ = try Self.check("sendmsg", CInt(sent))
        Glibc.close(sender)  // not the last reference: this close does not linger
        Glibc.close(outer)
        return inner
    }

    /// The linger ends: the peer resets, reading nothing.
    func release() {
        guard !ended else { return }
        ended = true
        try? Self.set(peer, SO_LINGER, linger(l_onoff: 1, l_linger: 0))
        Glibc.close(peer)
        Glibc.close(listener)
    }

    private static func check(_ call: String, _ result: CInt) throws -> CInt {
        guard result >= 0 else { throw DescriptorCloserTests.Failed.call(call, errno) }
        return result
    }

    private static func set<T: BitwiseCopyable>(_ fd: CInt, _ option: CInt, _ value: T) throws {
        var value = value
        _ = try check("setsockopt", setsockopt(fd, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<T>.size)))
    }
}
