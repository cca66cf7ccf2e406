import CLinux
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Reading, answering and writing on the loop's thread.
extension ServerLoop {
    func ready(_ connection: Connection, flags: UInt32) {
        if connection.refused { return closeRefused(connection) }  // its first message, or its end
        if flags & EPOLLOUT.rawValue != 0 {
            flush(connection)
            if connection.gone { return }
        }
        if flags & EPOLLIN.rawValue != 0, !connection.busy {
            readable(connection)
        } else if flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            close(connection)
        }
    }

    func readable(_ connection: Connection) {
        let count = read(connection.fd, input.baseAddress, input.count)
        if count <= 0 {
            if count < 0, errno == EAGAIN || errno == EINTR { return }
            return close(connection)  // end of stream or a reset
        }
        connection.lastActive = now
        output.removeAll(keepingCapacity: true)
        let bytes = UnsafeRawBufferPointer(rebasing: input[0..<count])
        if connection.unprocessed.isEmpty {
            let taken = take(bytes, on: connection)
            if connection.gone { return }
            if taken < count {
                connection.unprocessed.append(contentsOf: bytes[taken...])
                connection.frameStarted = now
            }
        } else {
            connection.unprocessed.append(contentsOf: bytes)
            takeUnprocessed(connection)
            if connection.gone { return }
        }
        settle(connection)
    }

    /// A call's replies from the service: written, then the calls that came after it are taken.
    func answered(_ connection: Connection, replies: [UInt8]) {
        connection.busy = false
        connection.stream = nil
        connection.lastActive = now
        output.removeAll(keepingCapacity: true)
        output.append(contentsOf: replies)
        if !connection.unprocessed.isEmpty {
            takeUnprocessed(connection)
            if connection.gone { return }
        }
        settle(connection)
    }

    /// One reply of a stream: written (or queued), and its task told once
    /// it is on the socket; the task sends the next one only then. A
    /// subscriber whose socket takes nothing for `writeTimeout` is closed,
    /// and its task told the reply was not delivered.
    func streamed(_ connection: Connection, reply: [UInt8], written: CheckedContinuation<Bool, Never>) {
        transmit(reply, to: connection, then: .stream(written))
    }

    /// Writes `bytes` (what the socket does not take waits, and the connection
    /// asks to be told when it is writable); `then` completes once they are on
    /// the socket, or at once, unwritten, if the connection is gone.
    func transmit(_ bytes: [UInt8], to connection: Connection, then delivery: Delivery?) {
        output.removeAll(keepingCapacity: true)
        output.append(contentsOf: bytes)
        send(connection)
        if connection.gone { return delivery?.complete(written: false) ?? () }
        guard connection.sent < connection.queued else { return delivery?.complete(written: true) ?? () }
        if let delivery { connection.deliveries.append((connection.queued, delivery)) }
        updateInterest(connection)
    }

    /// After a read or an answer: an unfinished message over the limit is
    /// answered and the connection closed; replies are written.
    private func settle(_ connection: Connection) {
        if !connection.busy, connection.unprocessed.count > limits.maximumFrameLength { return tooLarge(connection) }
        guard account(connection, holding: connection.unprocessed.count) else {
            logger.notice(
                "closing connection: too many unfinished bytes from one user",
                metadata: ["limit": "\(limits.maximumUnfinishedBytesPerUser)", "peer.uid": "\(connection.peer?.uid ?? 0)"])
            return answerAndClose(connection, errors.oversized)
        }
        if connection.unprocessed.isEmpty {
            connection.frameStarted = nil
        } else if connection.frameStarted == nil {
            connection.frameStarted = now
        }
        send(connection)
        if !connection.gone { updateInterest(connection) }
    }

    private func takeUnprocessed(_ connection: Connection) {
        let bytes = connection.unprocessed
        connection.unprocessed = []
        let taken = bytes.withUnsafeBytes { take($0, on: connection) }
        guard !connection.gone, taken < bytes.count else { return }
        connection.unprocessed = taken == 0 ? bytes : Array(bytes[taken...])  // a message still arriving: no copy
        if taken > 0 { connection.frameStarted = now }  // the unfinished message is a later one
    }

    /// Takes the complete messages at the start of `bytes` until a call goes
    /// to the service; returns how many bytes it took.
    private func take(_ bytes: UnsafeRawBufferPointer, on connection: Connection) -> Int {
        var start = 0
        while !connection.busy, start < bytes.count,
            let found = memchr(bytes.baseAddress! + start, 0, bytes.count - start)
        {
            let end = bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
            let frame = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
            start = end + 1
            guard frame.count <= limits.maximumFrameLength else {
                tooLarge(connection)
                return bytes.count
            }
            guard let (call, repeated) = parse(frame, on: connection) else {
                logger.notice("closing connection: malformed message")
                answerAndClose(connection, errors.malformed)
                return bytes.count
            }
            if call.upgrade {
                if !call.oneway { VarlinkReply(errors.upgrade).encode(into: &output) }
            } else if repeated, let again = connection.lastFast, now < again.until, again.stamp == fastPathStamp() {
                output.append(contentsOf: again.bytes)
            } else if let fastPath, case let stamp = fastPathStamp(), let reply = fastPath(call, connection.peer) {
                output.append(contentsOf: reply.bytes)
                connection.lastFast = reply.reusableFor > .zero ? (reply.bytes, now + reply.reusableFor.nanoseconds, stamp) : nil
            } else {
                dispatch(call, on: connection)
            }
        }
        return start
    }

    /// The frame's call, or nil if it is not one, and whether it repeats the
    /// previous frame (most clients ask for their token the same way every
    /// time): a repeat is not parsed again.
    private func parse(_ frame: UnsafeRawBufferPointer, on connection: Connection) -> (VarlinkCall, repeated: Bool)? {
        guard frame.count > 0 else { return nil }
        if let last = connection.lastCall, connection.lastFrame.count == frame.count,
            connection.lastFrame.withUnsafeBytes({ memcmp($0.baseAddress!, frame.baseAddress!, frame.count) == 0 })
        {
            return (last, true)
        }
        guard let call = try? VarlinkCall(frame: frame) else { return nil }
        connection.lastFrame = Array(frame)
        connection.lastCall = call
        connection.lastFast = nil
        return (call, false)
    }

    private func tooLarge(_ connection: Connection) {
        logger.notice("closing connection: message too large", metadata: ["limit": "\(limits.maximumFrameLength)"])
        answerAndClose(connection, errors.oversized)
    }

    /// Writes what is owed and the error, then closes: the client learns why.
    private func answerAndClose(_ connection: Connection, _ error: VarlinkError) {
        VarlinkReply(error).encode(into: &output)
        connection.unwritten.append(contentsOf: output)
        output.removeAll(keepingCapacity: true)
        _ = connection.unwritten.withUnsafeBytes {
            Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        close(connection)
    }

    // MARK: Writing

    func send(_ connection: Connection) {
        guard !output.isEmpty else { return }
        connection.queued += output.count
        guard connection.unwritten.isEmpty else {
            connection.unwritten.append(contentsOf: output)
            return
        }
        let written = output.withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if written < 0, errno != EAGAIN, errno != EINTR { return close(connection) }
        connection.sent += max(0, written)
        if written == output.count { return }
        connection.unwritten = Array(output[max(0, written)...])
        connection.unwritableSince = now
    }

    private func flush(_ connection: Connection) {
        if !connection.unwritten.isEmpty {
            let written = connection.unwritten.withUnsafeBytes {
                Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EAGAIN || errno == EINTR { return }
                return close(connection)
            }
            connection.sent += written
            connection.unwritten.removeFirst(written)
            if connection.unwritten.isEmpty { connection.unwritableSince = nil }
            while let first = connection.deliveries.first, first.end <= connection.sent {
                connection.deliveries.removeFirst()
                first.delivery.complete(written: true)
            }
        }
        updateInterest(connection)
    }

    /// Reads while no call is with the service and the replies waiting to be
    /// written stay under the high watermark; asks to be told when the socket
    /// is writable while any wait. Hang-ups are reported whatever is asked.
    func updateInterest(_ connection: Connection) {
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
