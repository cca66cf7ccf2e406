import CLinux
import Synchronization
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// A file descriptor a client passed with a call (SCM_RIGHTS), for the
/// method that serves the call: it takes it, or it goes to the closer once
/// the call is answered. At most one descriptor goes with a call, and only
/// after the client asked for it (ExpectDescriptor); any other a client
/// sends is refused by the kernel, or, where the kernel cannot refuse it,
/// handed to the closer as it is read.
public final class PassedDescriptor: Sendable {
    private let descriptor: Mutex<CInt?>
    private let closer: DescriptorCloser
    private let person: UInt32

    init(_ fd: CInt, closer: DescriptorCloser, person: UInt32) {
        descriptor = Mutex(fd)
        self.closer = closer
        self.person = person
    }

    /// The call's descriptor, if any was passed with it: task-local, set for
    /// the call's handler by the server loop.
    @TaskLocal public static var current: PassedDescriptor?

    /// The descriptor, now the caller's; nil if already taken. What the
    /// caller does not keep goes back through `discard`.
    public func take() -> CInt? {
        descriptor.withLock { fd in
            defer { fd = nil }
            return fd
        }
    }

    /// Closes `fd`, taken from this descriptor, away from the caller's
    /// thread: its close may block for as long as the client likes.
    public func discard(_ fd: CInt) {
        closer.close(fd, for: person)
    }

    /// After the call: a descriptor its method did not take is closed.
    func closeUntaken() {
        if let fd = take() { discard(fd) }
    }
}

/// How the loop takes descriptors peers pass (SCM_RIGHTS).
public enum DescriptorIntake: Sendable, Equatable {
    /// Connections refuse them in the kernel (SO_PASSRIGHTS off, Linux
    /// 6.16+) unless one asked for a descriptor with its next call.
    case kernelRefuses
    /// Kernels without SO_PASSRIGHTS take every descriptor sent: the loop
    /// reads them and hands those not asked for to the closer.
    case drain
}

extension ServerLoop {
    /// SO_PASSRIGHTS (asm-generic/socket.h); Debian bookworm's headers predate it.
    static let passRights: CInt = 83

    /// Turns descriptor passing on the socket on or off; false where the
    /// kernel has no SO_PASSRIGHTS.
    @discardableResult
    static func allowDescriptors(on fd: CInt, _ allowed: Bool) -> Bool {
        var value: CInt = allowed ? 1 : 0
        return setsockopt(fd, SOL_SOCKET, passRights, &value, socklen_t(MemoryLayout<CInt>.size)) == 0
    }

    /// Room for as many descriptors as one message carries (SCM_MAX_FD): the
    /// kernel would drop those that did not fit itself, and the last
    /// reference's close would run here, on the loop. All but the one asked
    /// for go to the closer.
    static let controlLength = MemoryLayout<cmsghdr>.size + MemoryLayout<CInt>.stride * 256

    /// Reads into `input` like read(2), taking a descriptor passed with the
    /// bytes (MSG_CMSG_CLOEXEC: never inherited by anything tokend runs).
    func receive(_ connection: Connection) -> Int {
        var vector = iovec(iov_base: input.baseAddress, iov_len: input.count)
        var message = msghdr()
        let count = withUnsafeMutablePointer(to: &vector) { vector in
            message.msg_iov = vector
            message.msg_iovlen = 1
            message.msg_control = control.baseAddress
            message.msg_controllen = Self.controlLength
            return recvmsg(connection.fd, &message, Int32(MSG_CMSG_CLOEXEC))
        }
        if message.msg_controllen >= MemoryLayout<cmsghdr>.size {
            took(descriptors: Self.descriptors(in: control, length: message.msg_controllen), on: connection, read: count)
        }
        return count
    }

    /// The descriptors of SCM_RIGHTS control messages in `control`.
    static func descriptors(in control: UnsafeMutableRawBufferPointer, length: Int) -> [CInt] {
        var found: [CInt] = []
        var offset = 0
        let header = MemoryLayout<cmsghdr>.size
        while offset + header <= length {
            let message = control.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
            let size = Int(message.cmsg_len)
            guard size >= header, offset + size <= length else { break }
            if message.cmsg_level == SOL_SOCKET, message.cmsg_type == Int32(SCM_RIGHTS) {
                for index in 0..<((size - header) / MemoryLayout<CInt>.size) {
                    found.append(
                        control.loadUnaligned(
                            fromByteOffset: offset + header + index * MemoryLayout<CInt>.size, as: CInt.self))
                }
            }
            offset += (size + 7) & ~7
        }
        return found
    }

    /// A descriptor the connection asked for goes with the call whose frame
    /// ends where this read ended (the client sends the call and its
    /// descriptor in one sendmsg), and the connection takes none after it;
    /// any other goes to the closer.
    private func took(descriptors: [CInt], on connection: Connection, read count: Int) {
        guard let first = descriptors.first else { return }
        for extra in descriptors.dropFirst() { discard(extra, of: connection) }
        guard count > 0, connection.expecting, connection.side == nil, connection.passed == nil else {
            return discard(first, of: connection)
        }
        connection.expecting = false
        if intake == .kernelRefuses { Self.allowDescriptors(on: connection.fd, false) }
        connection.passed = (first, connection.received + count)
    }

    /// The descriptor that came with the frame just taken (its end is
    /// `connection.taken`), if any; one whose frame went by without it goes to the closer.
    func descriptor(for connection: Connection) -> PassedDescriptor? {
        guard let passed = connection.passed, passed.end <= connection.taken else { return nil }
        connection.passed = nil
        guard passed.end == connection.taken else {
            discard(passed.fd, of: connection)
            return nil
        }
        return PassedDescriptor(passed.fd, closer: closer, person: connection.sender)
    }

    /// Whether descriptors may wait in a socket just accepted: always where
    /// the kernel cannot refuse them; else only if it was made before the
    /// listener refused them (a queue systemd held before tokend started).
    func mayHoldDescriptors(_ fd: CInt) -> Bool {
        guard intake == .kernelRefuses else { return true }
        var value: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(fd, SOL_SOCKET, Self.passRights, &value, &length) == 0, value != 0 else { return false }
        Self.allowDescriptors(on: fd, false)
        return true
    }

    /// Closes a socket the loop accepted: here if no descriptor can wait in
    /// it, else by the closer — its close drops what waits unread in it, and
    /// the last reference's close would run in the closing thread. It is shut
    /// down first, so the peer sees the end now. Nothing is read out of it
    /// into tokend's own descriptor table.
    func closeAccepted(_ fd: CInt, person: UInt32, mayHoldDescriptors: Bool) {
        guard mayHoldDescriptors else { return _ = Glibc.close(fd) }
        _ = watch(fd, events: 0, operation: EPOLL_CTL_DEL)
        shutdown(fd, Int32(SHUT_RDWR))
        closer.close(fd, for: person)
    }

    /// SO_OOBINLINE: an out-of-band byte (MSG_OOB, Linux 5.15+) and the
    /// descriptors sent with it arrive as the rest do; otherwise the read
    /// that passes it frees it, and the last reference's close runs there.
    static func urgentInline(_ fd: CInt) -> Bool {
        var on: CInt = 1
        return setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, socklen_t(MemoryLayout<CInt>.size)) == 0
    }

    /// Whether the connection's reads stop: on a connection that may hold
    /// descriptors, a person whose closes are stuck is read no further (each
    /// read would put up to 253 more in tokend's table); the connection goes
    /// to the closer as it is.
    func refusesReading(_ connection: Connection) -> Bool {
        connection.mayHoldDescriptors && closer.isStuck(connection.sender)
    }

    func discard(_ fd: CInt, of connection: Connection) {
        closer.close(fd, for: connection.sender)
    }

    /// ExpectDescriptor, answered here: the connection takes one descriptor
    /// with its next call. Not on a share's socket, and not while the
    /// person's earlier descriptors are still being closed.
    func expectDescriptor(_ call: VarlinkCall, on connection: Connection) {
        let reply: VarlinkReply
        if connection.side != nil {
            reply = VarlinkReply(.permissionDenied)
        } else if closer.isStuck(connection.sender) {
            reply = VarlinkReply(errors.descriptorsPending(closer.pending(for: connection.sender), closer.limit))
        } else {
            if intake == .kernelRefuses, !connection.expecting {
                Self.allowDescriptors(on: connection.fd, true)
            }
            connection.expecting = true
            connection.mayHoldDescriptors = true
            reply = VarlinkReply(parameters: [:])
        }
        if !call.oneway { reply.encode(into: &output) }
    }
}
