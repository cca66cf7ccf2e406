import CLinux
import Synchronization
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Reading, answering and writing on the front loop's thread.
extension FrontLoop {
    func ready(_ connection: FrontConnection, flags: UInt32) {
        if flags & EPOLLOUT.rawValue != 0 {
            flush(connection)
            if connection.gone { return }
        }
        if flags & EPOLLIN.rawValue != 0 {
            readable(connection)
        } else if flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            close(connection)
        }
    }

    func readable(_ connection: FrontConnection) {
        let count = read(connection.fd, input.baseAddress, input.count)
        if count <= 0 {
            if count < 0, errno == EAGAIN || errno == EINTR { return }
            return close(connection)  // end of stream or a reset
        }
        connection.lastRead = now
        output.removeAll(keepingCapacity: true)
        let bytes = UnsafeRawBufferPointer(rebasing: input[0..<count])
        if connection.unprocessed.isEmpty {
            let taken = take(bytes, on: connection)
            if connection.gone { return }
            if taken < count { connection.unprocessed.append(contentsOf: bytes[taken...]) }
        } else {
            connection.unprocessed.append(contentsOf: bytes)
            takeUnprocessed(connection)
            if connection.gone { return }
        }
        settle(connection)
    }

    /// A call's replies from the service: written, then the calls that came after it are taken.
    func answered(_ connection: FrontConnection, replies: [UInt8]) {
        connection.busy = false
        connection.lastRead = now
        output.removeAll(keepingCapacity: true)
        output.append(contentsOf: replies)
        if !connection.unprocessed.isEmpty {
            takeUnprocessed(connection)
            if connection.gone { return }
        }
        settle(connection)
    }

    /// After a read or an answer: an unfinished message over the limit goes
    /// to NIO (which answers "too large" and closes); replies are written.
    private func settle(_ connection: FrontConnection) {
        if !connection.busy, connection.unprocessed.count > limits.maximumFrameLength {
            return pass(connection, unread: connection.unprocessed)
        }
        send(connection)
        if !connection.gone { updateInterest(connection) }
    }

    private func takeUnprocessed(_ connection: FrontConnection) {
        let bytes = connection.unprocessed
        connection.unprocessed = []
        let taken = bytes.withUnsafeBytes { take($0, on: connection) }
        if !connection.gone, taken < bytes.count {
            connection.unprocessed = taken == 0 ? bytes : Array(bytes[taken...])  // a message still arriving: no copy
        }
    }

    /// Takes the complete messages at the start of `bytes` until a call goes
    /// to the service or the connection to NIO; returns how many bytes it took.
    private func take(_ bytes: UnsafeRawBufferPointer, on connection: FrontConnection) -> Int {
        var start = 0
        while !connection.busy, start < bytes.count,
            let found = memchr(bytes.baseAddress! + start, 0, bytes.count - start)
        {
            let end = bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
            guard let call = parse(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), on: connection),
                !call.more, !call.upgrade
            else {
                pass(connection, unread: Array(bytes[start...]))
                return bytes.count
            }
            if let fastPath, let reply = fastPath(call, connection.peer) {
                output.append(contentsOf: reply)
            } else {
                dispatch(call, on: connection)
            }
            start = end + 1
        }
        return start
    }

    /// The frame's call; a client repeating its previous frame (most ask for
    /// their token the same way every time) is not parsed again.
    private func parse(_ frame: UnsafeRawBufferPointer, on connection: FrontConnection) -> VarlinkCall? {
        guard frame.count > 0 else { return nil }
        if let last = connection.lastCall, connection.lastFrame.count == frame.count,
            connection.lastFrame.withUnsafeBytes({ memcmp($0.baseAddress!, frame.baseAddress!, frame.count) == 0 })
        {
            return last
        }
        guard let call = try? VarlinkCall(frame: frame) else { return nil }
        connection.lastFrame = Array(frame)
        connection.lastCall = call
        return call
    }

    /// The service handles the call in a task; its replies come back through `post`.
    private func dispatch(_ call: VarlinkCall, on connection: FrontConnection) {
        connection.busy = true
        let (fd, id, peer, service) = (connection.fd, connection.id, connection.peer, self.service)
        Task {
            let replies = EncodedReplies()
            try? await service.handle(call, peer: peer, send: { replies.append($0) })
            self.post(replies.take(), fd: fd, connection: id)
        }
    }

    // MARK: Writing

    private func send(_ connection: FrontConnection) {
        guard !output.isEmpty else { return }
        guard connection.unwritten.isEmpty else {
            connection.unwritten.append(contentsOf: output)
            return
        }
        let written = output.withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if written == output.count { return }
        if written < 0, errno != EAGAIN, errno != EINTR { return close(connection) }
        connection.unwritten = Array(output[max(0, written)...])
        connection.unwritableSince = now
    }

    private func flush(_ connection: FrontConnection) {
        if !connection.unwritten.isEmpty {
            let written = connection.unwritten.withUnsafeBytes {
                Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EAGAIN || errno == EINTR { return }
                return close(connection)
            }
            connection.unwritten.removeFirst(written)
            if connection.unwritten.isEmpty { connection.unwritableSince = nil }
        }
        updateInterest(connection)
    }

    /// Reads while no call is with the service and the replies waiting to be
    /// written stay under the high watermark; asks to be told when the socket
    /// is writable while any wait.
    private func updateInterest(_ connection: FrontConnection) {
        var wanted: UInt32 = 0
        if !connection.busy, connection.unwritten.count < limits.writeBufferHighWatermark {
            wanted |= EPOLLIN.rawValue
        }
        if !connection.unwritten.isEmpty { wanted |= EPOLLOUT.rawValue }
        guard wanted != connection.interest else { return }
        connection.interest = wanted
        if !watch(connection.fd, events: wanted, operation: EPOLL_CTL_MOD) { close(connection) }
    }
}

/// A call's replies as the service sends them, encoded.
final class EncodedReplies: Sendable {
    private let bytes = Mutex<[UInt8]>([])

    func append(_ reply: VarlinkReply) {
        bytes.withLock { reply.encode(into: &$0) }
    }

    func take() -> [UInt8] {
        bytes.withLock { $0 }
    }
}
