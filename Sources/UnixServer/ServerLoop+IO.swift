import CLinux
import TokendMetrics
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Reading, answering and writing on the loop's thread.
///
/// What a connection holds is bounded before work is done for it: calls are
/// taken one frame at a time while its waiting replies stay under the high
/// watermark (checked before each frame is parsed); calls read and not yet
/// taken, unfinished messages and waiting replies count in its person's
/// budget, and so do waiting replies behind the one being written, which
/// also close it past `maximumUnwrittenBytes`. Nothing of
/// a served call stays with the connection but a small frame the fast path
/// may answer again.
extension ServerLoop {
    func ready(_ connection: Connection, flags: UInt32) {
        if connection.refused { return closeRefused(connection) }  // its first message, or its end
        if flags & EPOLLOUT.rawValue != 0 {
            flush(connection)
            if connection.gone { return }
        }
        if flags & EPOLLIN.rawValue != 0, !connection.busy, !connection.readEnded {
            readable(connection)
        } else if flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            close(connection)
        }
    }

    func readable(_ connection: Connection) {
        if refusesReading(connection) { return close(connection) }
        let count = receive(connection)
        if count < 0 {
            if errno == EAGAIN || errno == EINTR { return }
            return close(connection)  // a reset
        }
        guard count > 0 else {
            // The client sends no more (it may have only shut down its side):
            // what it sent is still answered, and the connection closes once
            // every reply is written.
            connection.readEnded = true
            return settle(connection)
        }
        connection.lastActive = now
        connection.received += count
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
    func answered(_ connection: Connection, replies: [UInt8]) {
        connection.busy = false
        connection.stream = nil
        connection.lastActive = now
        output.append(contentsOf: replies)
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
        output.append(contentsOf: bytes)
        send(connection)
        if connection.gone { return delivery?.complete(written: false) ?? () }
        guard connection.sent < connection.queued else { return delivery?.complete(written: true) ?? () }
        if let delivery { connection.deliveries.append((connection.queued, delivery)) }
        guard withinLimits(connection) else { return }  // closed: the delivery learns it was not written
        updateInterest(connection)
    }

    /// After a read, an answer or a write: replies are written, and calls
    /// waiting in `unprocessed` are taken for as long as the replies stay
    /// under the watermark; then the limits, and the end of a connection
    /// whose client sends no more.
    func settle(_ connection: Connection) {
        while true {
            send(connection)
            if connection.gone { return }
            guard !connection.busy, connection.scanned < connection.unprocessed.count,
                connection.unwritten.count < limits.writeBufferHighWatermark
            else { break }
            takeUnprocessed(connection)
            if connection.gone { return }
        }
        guard withinLimits(connection) else { return }
        if connection.readEnded, !connection.busy, connection.unwritten.isEmpty,
            connection.scanned >= connection.unprocessed.count
        {
            return close(connection)  // all answered; an unfinished message is never finished
        }
        updateInterest(connection)
    }

    private func takeUnprocessed(_ connection: Connection) {
        let taken = connection.unprocessed.withUnsafeBytes { take($0, on: connection) }
        guard !connection.gone, taken > 0 else { return }
        releasedBytes += connection.unprocessed.removeFirst(taken)
    }

    /// Takes complete messages from the start of `bytes` while no call is with
    /// the service and the replies waiting stay under the high watermark;
    /// returns how many bytes it took. Leaves in `connection.scanned` how much
    /// of the rest is known to hold no NUL, so that a message arriving in
    /// many reads is searched once.
    private func take(_ bytes: UnsafeRawBufferPointer, on connection: Connection) -> Int {
        var start = 0
        while !connection.busy, start < bytes.count,
            output.count + connection.unwritten.count < limits.writeBufferHighWatermark
        {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[start...])
            let from = connection.scanned
            switch NULFraming.scan(rest, scanned: from, limit: limits.maximumFrameLength) {
            case .tooLarge:
                tooLarge(connection)
                return bytes.count
            case .incomplete(let scanned):
                connection.examined &+= scanned - from
                connection.scanned = scanned
                if connection.frameStarted == nil { connection.frameStarted = now }
                return start
            case .frame(let length):
                connection.examined &+= length + 1 - from
                connection.scanned = 0
                connection.frameStarted = nil
                connection.taken += length + 1
                start += length + 1
                guard serve(UnsafeRawBufferPointer(rebasing: rest[0..<length]), on: connection) else { return bytes.count }
            }
        }
        return start
    }

    /// Answers one frame here (fast path, upgrade) or hands it to the
    /// service; false if it was malformed and the connection closed.
    private func serve(_ frame: UnsafeRawBufferPointer, on connection: Connection) -> Bool {
        let descriptor = descriptor(for: connection)
        guard let (call, repeated) = parse(frame, on: connection) else {
            descriptor?.closeUntaken()
            metrics?.closed(.malformed)
            logger.notice("closing connection: malformed message")
            answerAndClose(connection, errors.malformed)
            return false
        }
        if descriptor == nil, repeated, let again = connection.lastFast, bootNow < again.until,
            again.stamp == fastPathStamp()
        {
            output.append(contentsOf: again.bytes)
            connection.lastCounter?.increment()
        } else if descriptor == nil, !call.upgrade, connection.side == nil, let fastPath, case let stamp = fastPathStamp(),
            let reply = fastPath(call, connection.peer)
        {
            output.append(contentsOf: reply.bytes)
            remember(frame, call: call, reply: reply, stamp: stamp, on: connection)
            connection.lastCounter?.increment()
        } else {
            connection.forgetLastCall()
            if call.upgrade {
                descriptor?.closeUntaken()
                if !call.oneway { VarlinkReply(errors.upgrade).encode(into: &output) }
            } else if call.method == descriptorMethod {
                descriptor?.closeUntaken()
                expectDescriptor(call, on: connection)
            } else {
                dispatch(call, on: connection, descriptor: descriptor)
            }
        }
        return true
    }

    /// The frame's call, or nil if it is not one, and whether it repeats the
    /// frame the fast path answered last (most clients ask for their token
    /// the same way every time): a repeat is not parsed again.
    private func parse(_ frame: UnsafeRawBufferPointer, on connection: Connection) -> (VarlinkCall, repeated: Bool)? {
        guard frame.count > 0 else { return nil }
        if let last = connection.lastCall, connection.lastFrame.count == frame.count,
            connection.lastFrame.withUnsafeBytes({ memcmp($0.baseAddress!, frame.baseAddress!, frame.count) == 0 })
        {
            return (last, true)
        }
        guard let call = try? VarlinkCall(frame: frame) else { return nil }
        return (call, false)
    }

    /// Keeps a fast reply to be given again, with its frame and call, only
    /// while they are small: no connection holds a large message once served.
    private func remember(
        _ frame: UnsafeRawBufferPointer, call: VarlinkCall, reply: VarlinkServer.FastReply, stamp: UInt64,
        on connection: Connection
    ) {
        guard reply.reusableFor > .zero, frame.count <= Connection.rememberedFrame else {
            connection.forgetLastCall()
            metrics?.calls(method: call.method, error: nil).increment()
            return
        }
        if connection.lastCall == nil || connection.lastFrame.count != frame.count
            || !connection.lastFrame.elementsEqual(frame)
        {
            connection.lastFrame = Array(frame)
            connection.lastCall = call
            connection.lastCounter = metrics?.calls(method: call.method, error: nil)
        }
        connection.lastFast = (reply.bytes, bootNow.addingSaturating(reply.reusableFor.nanoseconds), stamp)
    }

    private func tooLarge(_ connection: Connection) {
        metrics?.closed(.tooLarge)
        logger.notice("closing connection: message too large", metadata: ["limit": "\(limits.maximumFrameLength)"])
        answerAndClose(connection, errors.oversized)
    }

    /// Writes what is owed and the error, then closes: the client learns why.
    func answerAndClose(_ connection: Connection, _ error: VarlinkError) {
        VarlinkReply(error).encode(into: &output)
        connection.unwritten.append(contentsOf: output)
        resetOutput()
        _ = connection.unwritten.withUnsafeBytes {
            Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        close(connection)
    }

    /// False, with the connection closed, if the replies waiting behind the
    /// one being written pass the hard cap, or its person's connections hold
    /// more than their budget. The reply being written counts in neither: a
    /// reply the server made is the server's to deliver, whatever its size
    /// (up to `maximumReplyLength`, what clients accept), and a client that
    /// reads it is never closed for it; one that does not read takes no
    /// further call (the watermark) and meets the write timeout.
    private func withinLimits(_ connection: Connection) -> Bool {
        let current = replyInProgress(connection)
        if current > VarlinkServer.Limits.maximumReplyLength {
            metrics?.closed(.replyTooLarge)
            logger.notice(
                "closing connection: a reply larger than clients accept",
                metadata: ["limit": "\(VarlinkServer.Limits.maximumReplyLength)", "peer.uid": "\(connection.peer?.uid ?? 0)"])
            close(connection)
            return false
        }
        let behind = connection.unwritten.count - current
        if behind > limits.maximumUnwrittenBytes {
            metrics?.closed(.unreadReplies)
            logger.notice(
                "closing connection: too many replies not read",
                metadata: ["limit": "\(limits.maximumUnwrittenBytes)", "peer.uid": "\(connection.peer?.uid ?? 0)"])
            close(connection)
            return false
        }
        guard account(connection, holding: connection.unprocessed.count + behind) else {
            metrics?.closed(.personBudget)
            logger.notice(
                "closing connection: one person's connections hold too many bytes",
                metadata: [
                    "limit": "\(limits.maximumBufferedBytesPerPerson)", "peer.uid": "\(connection.peer?.uid ?? 0)",
                    "person": "\(connection.person)",
                ])
            answerAndClose(connection, errors.oversized)
            return false
        }
        return true
    }

    /// How many bytes at the front of `unwritten` are the reply being
    /// written, NUL included. Each reply is searched once, when it comes to
    /// the front: `replyEnd` remembers where it ends.
    private func replyInProgress(_ connection: Connection) -> Int {
        let count = connection.unwritten.count
        if count > 0, connection.replyEnd <= connection.sent {
            let length = connection.unwritten.withUnsafeBytes { bytes in
                memchr(bytes.baseAddress!, 0, count).map { bytes.baseAddress!.distance(to: UnsafeRawPointer($0)) + 1 }
                    ?? count
            }
            connection.replyEnd = connection.sent + length
        }
        return min(count, max(0, connection.replyEnd - connection.sent))
    }

    // MARK: Writing

    /// Writes `output` (what the socket does not take waits in `unwritten`),
    /// leaving `output` empty.
    func send(_ connection: Connection) {
        guard !output.isEmpty else { return }
        defer { resetOutput() }
        connection.queued += output.count
        guard connection.unwritten.isEmpty else { return connection.unwritten.append(contentsOf: output) }
        let written = output.withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if written < 0, errno != EAGAIN, errno != EINTR { return close(connection) }
        connection.sent += max(0, written)
        if written == output.count { return }
        connection.unwritten.append(contentsOf: output[max(0, written)...])
        connection.lastProgress = now
    }

    /// The loop's scratch for replies: emptied, and given back if a large reply grew it.
    func resetOutput() {
        if output.capacity > 256 * 1024 {
            releasedBytes += output.capacity
            output = []
            output.reserveCapacity(64 * 1024)
        } else {
            output.removeAll(keepingCapacity: true)
        }
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
            if written > 0 { connection.lastProgress = now }  // the write timeout runs from the last progress
            releasedBytes += connection.unwritten.removeFirst(written)
            while let first = connection.deliveries.first, first.end <= connection.sent {
                connection.deliveries.removeFirst()
                first.delivery.complete(written: true)
            }
        }
        settle(connection)  // calls held back by the watermark are taken now
    }

    /// Reads while the client may send, no call is with the service and the
    /// replies waiting to be written stay under the high watermark; asks to be
    /// told when the socket is writable while any wait. Hang-ups are reported
    /// whatever is asked.
    func updateInterest(_ connection: Connection) {
        var wanted: UInt32 = 0
        if !connection.busy, !connection.readEnded, connection.unwritten.count < limits.writeBufferHighWatermark {
            wanted |= EPOLLIN.rawValue
        }
        if !connection.unwritten.isEmpty { wanted |= EPOLLOUT.rawValue }
        guard wanted != connection.interest else { return }
        connection.interest = wanted
        if !watch(connection.fd, events: wanted, operation: EPOLL_CTL_MOD) { close(connection) }
    }
}

extension Int64 {
    func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}
