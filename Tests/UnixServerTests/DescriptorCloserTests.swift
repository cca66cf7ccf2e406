import Synchronization
import Testing
import CSystemd
import TestSupport

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// When a person's closes count as stuck: a close whose thread sleeps in it
/// past `stuckAfter` does; a quick close whose thread is runnable but not run
/// for as long (the scheduler on a busy machine, issue 50) does not.
@Suite struct DescriptorCloserTests {
    static let stuckAfter = Duration.milliseconds(200)

    @Test func aThreadHeldRunningInAQuickCloseIsNotStuck() async throws {
        let closer = DescriptorCloser(stuckAfter: Self.stuckAfter)
        let reached = Atomic(false)
        let released = Atomic(false)
        closer.beforeClose.withLock {
            $0 = { _ in
                reached.store(true, ordering: .sequentiallyConsistent)
                // On a CPU or waiting for one (state R), as a thread the scheduler has not run.
                while !released.load(ordering: .sequentiallyConsistent) {}
            }
        }
        let (mine, other) = try Self.socketPair()
        defer { Glibc.close(other) }
        closer.close(mine, for: 7)
        try await eventually(within: 30) { reached.load(ordering: .sequentiallyConsistent) }
        // The close began before the hold: once `stuckAfter` has passed since, the clock alone
        // would call it stuck.
        try await Task.sleep(for: Self.stuckAfter * 2)
        #expect(closer.pending(for: 7) == 1)
        let thread = try #require(closer.thread(for: 7))
        #expect(DescriptorCloser.asleep(thread) == false, "the kernel sees it running")
        #expect(!closer.isStuck(7), "held in its close, running")
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
        let thread = try #require(closer.thread(for: 9))
        #expect(DescriptorCloser.asleep(thread) == true, "the kernel's word, not only the clock's")
        #if arch(x86_64)
        #expect(Self.systemCall(of: thread) == "3", "asleep in close(2) (root reads /proc/…/syscall)")
        #endif
        lingering.release()
        try await eventually(within: 30) { closer.pending(for: 9) == 0 }
        #expect(!closer.isStuck(9))
    }

    @Test func theKernelsLineSaysWhetherAThreadSleeps() {
        func asleep(_ line: String) -> Bool? { DescriptorCloser.asleep(stat: Array(line.utf8)[...]) }
        #expect(asleep("4242 (tokend) S 1 4242 4242 0 -1 4194560 97 0 0 0\n") == true)
        #expect(asleep("4242 (tokend) D 1 4242 4242 0 -1\n") == true)
        #expect(asleep("4242 (tokend) R 1 4242 4242 0 -1\n") == false)
        #expect(asleep("4242 (a) S (b) R 1 4242\n") == false, "the state follows the last ')'")
        #expect(asleep("4242 (a) R (b) S 1 4242\n") == true)
        #expect(asleep("4242 (tokend) T 1\n") == false)
        #expect(asleep("") == nil)
        #expect(asleep("4242 tokend S 1\n") == nil)
        #expect(asleep("4242 (tokend)\n") == nil)
    }

    @Test func aThreadsStateIsReadableWhenTheProcessIsNotDumpable() throws {
        // tokend turns PR_SET_DUMPABLE off and runs as its own user: /proc/self/task/TID files
        // are then root's, and only world-readable ones (stat, 0444) stay readable to it.
        let thread = try #require(DescriptorCloser.currentThread())
        #expect(tokend_set_dumpable(0) == 0)
        defer { _ = tokend_set_dumpable(1) }
        var status = stat()
        #expect(lstat("/proc/self/task/\(thread)/stat", &status) == 0)
        #expect(status.st_mode & S_IROTH != 0, "stat: readable by any user")
        #expect(lstat("/proc/self/task/\(thread)/syscall", &status) == 0)
        #expect(status.st_mode & S_IROTH == 0 && status.st_uid == 0, "syscall: root's alone")
        #expect(DescriptorCloser.asleep(thread) == false, "this thread, running")
    }

    /// The first field of /proc/self/task/TID/syscall: the system call it sleeps in, or "running".
    static func systemCall(of thread: pid_t) -> String? {
        guard let file = fopen("/proc/self/task/\(thread)/syscall", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        guard fgets(&line, CInt(line.count), file) != nil else { return nil }
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first.map(String.init)
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
