import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A file descriptor a client passed with a call (SCM_RIGHTS), for the
/// method that serves the call: it takes it, or it is closed once the call
/// is answered. At most one descriptor goes with a call; any other a client
/// sends is closed as it is read, so a client cannot make tokend hold
/// descriptors it never asked for.
public final class PassedDescriptor: Sendable {
    private let descriptor: Mutex<CInt?>

    init(_ fd: CInt) { descriptor = Mutex(fd) }

    /// The call's descriptor, if any was passed with it: task-local, set for
    /// the call's handler by the server loop.
    @TaskLocal public static var current: PassedDescriptor?

    /// The descriptor, now the caller's to close; nil if already taken.
    public func take() -> CInt? {
        descriptor.withLock { fd in
            defer { fd = nil }
            return fd
        }
    }

    /// After the call: a descriptor its method did not take is closed.
    func closeUntaken() {
        if let fd = take() { close(fd) }
    }
}

extension ServerLoop {
    /// Room for one descriptor's control message: the kernel installs no
    /// more than fit (it drops the others' references itself), and any
    /// beyond the first that fit are closed at once.
    static let controlLength = MemoryLayout<cmsghdr>.size + MemoryLayout<CInt>.stride * 2

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

    /// The first descriptor goes with the call whose frame ends where this
    /// read ended (a client sends a call and its descriptor in one sendmsg);
    /// any other, and any sent on a share's connection, is closed now.
    private func took(descriptors: [CInt], on connection: Connection, read count: Int) {
        guard let first = descriptors.first else { return }
        for extra in descriptors.dropFirst() { Glibc.close(extra) }
        guard count > 0, connection.side == nil else {
            Glibc.close(first)
            return
        }
        if let earlier = connection.passed { Glibc.close(earlier.fd) }
        connection.passed = (first, connection.received + count)
    }

    /// The descriptor that came with the frame just taken (its end is
    /// `connection.taken`), if any; one whose frame went by without it is closed.
    func descriptor(for connection: Connection) -> PassedDescriptor? {
        guard let passed = connection.passed, passed.end <= connection.taken else { return nil }
        connection.passed = nil
        guard passed.end == connection.taken else {
            Glibc.close(passed.fd)
            return nil
        }
        return PassedDescriptor(passed.fd)
    }
}
