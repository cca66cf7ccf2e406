import CLinux
import NIOCore
import NIOSSL

#if canImport(Glibc)
import Glibc
#endif

/// What a socket tells the one it serves, on its loop.
protocol SocketUser: AnyObject {
    func socketRead(_ bytes: ByteBuffer)
    /// The reads of one readiness event are over.
    func socketReadComplete()
    /// `isWritable` changed.
    func socketWritabilityChanged()
    /// The peer shut its sending side (only with `halfClosure`; else the socket closes).
    func socketInputClosed()
    /// The socket is closed: by its user (`error` nil), by the peer, or after `error`.
    func socketClosed(error: (any Error)?)
}

/// A connected stream socket on a loop: reads go to its user as they come
/// while reading is on; writes queue until `flush` and leave with one
/// `writev`. `isWritable` turns false when more than `highWater` bytes wait to
/// go and true again under `lowWater`, so a user can stop what feeds it.
final class Socket {
    let fd: CInt
    unowned let loop: ProxyLoop
    var user: SocketUser?
    /// A peer that shuts its sending side may still be answered; without this the socket closes.
    let halfClosure: Bool
    /// Upstream connections speak TLS through this.
    let tls: TLSFilter?
    private(set) var isActive = true
    /// What its epoll events carry (set by the loop when it registers the socket).
    var registration: UInt64 = 0
    private(set) var isWritable = true
    /// The user takes reads; off, the kernel holds them (and the peer's sending slows).
    var reading = true {
        didSet { if reading && !oldValue && readable { loop.nextTurn { [self] in readAvailable() } } }
    }

    static let highWater = 64 * 1024
    static let lowWater = 32 * 1024

    /// Bytes may be waiting that were not read (an edge came, or reading stopped before they ran out).
    private var readable = false
    /// The peer shut its side or the socket failed: reads go on until they say so, short or not.
    private var hungUp = false
    private var inputEnded = false
    /// Written, not yet flushed.
    private var unflushed: [ByteBuffer] = []
    /// Flushed, not yet on the socket: from `sent` on.
    private var queued: [ByteBuffer] = []
    private var sent = 0
    private var pendingBytes = 0
    /// A write found the socket full: the next readiness for writing goes on with it.
    private var waitingForRoom = false
    /// Flushed bytes wait for the peer to take them (the kernel's buffer is full).
    var isWaitingForRoom: Bool { waitingForRoom }
    /// When a write last put bytes on the socket (set only while bytes wait, so a write that
    /// empties the queue at once reads no clock).
    private(set) var lastProgress = NIODeadline.uptimeNanoseconds(0)
    /// Bytes have waited since the queue was last empty.
    private var stalled = false
    private var closeWhenWritten = false

    init(fd: CInt, on loop: ProxyLoop, halfClosure: Bool, tls: TLSFilter? = nil) {
        self.fd = fd
        self.loop = loop
        self.halfClosure = halfClosure
        self.tls = tls
    }

    /// Reads what came before the socket had a user (with its connect, say), on the next turn.
    func readPending() {
        if readable { loop.nextTurn { [self] in if reading && readable { readAvailable() } } }
    }

    /// While a connect is under way: called at its first readiness, which says how it went.
    var onConnected: (() -> Void)?

    /// Readiness from epoll.
    func ready(_ events: UInt32) {
        if events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readable = true
        }
        if events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 { hungUp = true }
        if let onConnected { return onConnected() }
        if readable && reading { readAvailable() }
        if isActive, events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0, unreadBytes == 0 {
            // Reset, or closed both ways: over, whether or not reading is on (a read would have said so).
            // Bytes that came before it are read first, when reading resumes (an upstream's early answer).
            var code: CInt = 0
            var size = socklen_t(MemoryLayout<CInt>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &size)
            return close(error: SocketError("the connection", code == 0 ? ECONNRESET : code))
        }
        if isActive, events & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0, waitingForRoom {
            waitingForRoom = false
            writeQueued()
        }
    }

    /// Bytes the kernel holds for this socket.
    private var unreadBytes: CInt {
        var count: CInt = 0
        return ioctl(fd, UInt(FIONREAD), &count) == 0 ? count : 0
    }

    /// Reads one readiness event takes at most; more wait for the loop's next turn, so that one
    /// fast peer does not keep the loop's other connections waiting, and its user flushes between.
    static let readsPerEvent = 4

    /// Reads until the socket has no more for now, or reading is turned off, or the socket closes.
    private func readAvailable() {
        var delivered = false
        var reads = 0
        while isActive, reading, readable, !inputEnded {
            if reads == Self.readsPerEvent {
                loop.nextTurn { [self] in readAvailable() }
                break
            }
            reads += 1
            let count = read(fd, loop.scratch.baseAddress, loop.scratch.count)
            if count > 0 {
                // A short read emptied the socket: the next bytes come with an edge of their own (but a
                // hang-up that came with these bytes has had its edge).
                if count < loop.scratch.count && !hungUp { readable = false }
                let bytes = loop.allocator.buffer(bytes: UnsafeRawBufferPointer(rebasing: loop.scratch[0..<count]))
                delivered = true
                if let tls {
                    do {
                        let plain = try tls.decrypt(bytes)
                        writeQueued(tls.encrypted())  // what the TLS exchange answers (handshake, alerts)
                        for piece in plain { user?.socketRead(piece) }
                        if !tls.isOpen { return close(error: nil) }  // the server's close_notify
                    } catch {
                        return close(error: error)
                    }
                } else {
                    user?.socketRead(bytes)
                }
            } else if count == 0 {
                readable = false
                inputEnded = true
                if delivered { user?.socketReadComplete() }
                // The end of a TLS stream is close_notify; a bare end may be an attacker's cut.
                if let tls, tls.isOpen { return close(error: NIOSSLError.uncleanShutdown) }
                guard halfClosure, isActive else { return close(error: nil) }
                user?.socketInputClosed()
                return
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN {
                readable = false
            } else {
                return close(error: SocketError("read", errno))
            }
        }
        if delivered, isActive { user?.socketReadComplete() }
    }

    /// `bytes` go out with the next flush.
    func write(_ bytes: ByteBuffer) {
        guard isActive, bytes.readableBytes > 0 else { return }
        if let tls {
            tls.write(bytes)
        } else {
            unflushed.append(bytes)
        }
        pendingBytes += bytes.readableBytes
        if isWritable && pendingBytes > Self.highWater {
            isWritable = false
            loop.afterEvent { [self] in if isActive { user?.socketWritabilityChanged() } }
        }
    }

    func flush() {
        guard isActive else { return }
        if let tls {
            do {
                try tls.flush()
            } catch {
                return close(error: error)
            }
            writeQueued(tls.encrypted())
        } else if !unflushed.isEmpty {
            let taking = unflushed
            unflushed = []
            writeQueued(taking)
        }
    }

    func writeAndFlush(_ bytes: ByteBuffer) {
        write(bytes)
        flush()
    }

    /// What was written goes out, then the socket closes (the caller bounds how long that may take).
    func closeAfterWriting() {
        guard isActive else { return }
        flush()
        closeWhenWritten = true
        if isActive && queued.count == sent { close(error: nil) }
    }

    /// Appends `more` (flushed bytes) and writes what the socket takes.
    private func writeQueued(_ more: [ByteBuffer] = []) {
        queued.append(contentsOf: more.lazy.filter { $0.readableBytes > 0 })
        guard isActive, !waitingForRoom else { return }
        var progressed = false
        while sent < queued.count {
            let written = writeSome()
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { break }
                return close(error: SocketError("write", errno))
            }
            if written > 0 { progressed = true }
            var left = written
            while sent < queued.count, queued[sent].readableBytes <= left {
                left -= queued[sent].readableBytes
                queued[sent] = ByteBuffer()
                sent += 1
            }
            if left > 0 { queued[sent].moveReaderIndex(forwardBy: left) }
            if tls == nil { pendingBytes -= written }
        }
        if sent == queued.count {
            queued.removeAll(keepingCapacity: true)
            sent = 0
            stalled = false
            if tls != nil { pendingBytes = 0 }
            if closeWhenWritten { return close(error: nil) }
        } else {
            if progressed || !stalled { lastProgress = .now() }
            stalled = true
            waitingForRoom = true
            if sent > 64 {
                queued.removeFirst(sent)
                sent = 0
            }
        }
        if !isWritable && pendingBytes < Self.lowWater {
            isWritable = true
            loop.afterEvent { [self] in if isActive { user?.socketWritabilityChanged() } }
        }
    }

    /// One write or writev of the queued bytes: the count written, or -1 with errno.
    private func writeSome() -> Int {
        let first = queued[sent]
        if sent + 1 == queued.count {
            return first.withUnsafeReadableBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        }
        // The buffers stay in `queued` while writev runs, so the storage their pointers name is held.
        var vectors: [iovec] = []
        vectors.reserveCapacity(min(queued.count - sent, 64))
        for index in sent..<min(queued.count, sent + 64) {
            queued[index].withUnsafeReadableBytes { vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count)) }
        }
        return writev(fd, vectors, Int32(vectors.count))
    }

    /// Closes at once (what was not written is dropped) and tells the user.
    func close(error: (any Error)?) {
        guard isActive else { return }
        isActive = false
        loop.forget(self)
        if let tls {
            // close_notify, if the socket takes it now; the connection ends either way.
            if error == nil {
                for piece in tls.closing() { piece.withUnsafeReadableBytes { _ = Glibc.write(fd, $0.baseAddress, $0.count) } }
            }
            tls.dispose()
        }
        Glibc.close(fd)
        unflushed = []
        queued = []
        let user = self.user
        self.user = nil
        user?.socketClosed(error: error)
    }
}
