import Synchronization
import TokendMetrics
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// What the service's tasks hand back to the loop: a call's replies, one
/// reply of a stream, health checks.
struct Mailbox {
    enum Item {
        /// A call's replies (any number, possibly none); the connection may be read again.
        case finished([UInt8])
        /// One reply of a `more` call; `written` learns whether it reached the socket.
        case streamed([UInt8], written: CheckedContinuation<Bool, Never>)
        /// The connection's `more` call becomes the broadcast's member, after these replies.
        case join(Broadcast, [UInt8])
        /// One reply for every member of the broadcast (no connection of its own).
        case publish(Broadcast, [UInt8], (@Sendable () -> Void)?)
        /// The broadcast ends its members' calls with this reply.
        case finish(Broadcast, [UInt8])
        /// A listening socket to serve beside the loop's own, or to stop serving.
        case addSide(SideListener)
        case removeSide(SideListener)
        #if TOKEND_TEST_HOOKS
        /// Test builds only: runs on the loop's thread, to look at its state.
        case inspect(@Sendable (ServerLoop) -> Void)
        #endif
    }
    var items: [(fd: CInt, connection: UInt64, item: Item)] = []
    /// Health checks waiting for the loop to come round.
    var pings: [CheckedContinuation<Void, Error>] = []
    /// False once the loop has ended: nothing more is delivered.
    var open = true
    /// Why the loop ended, for health checks that come after.
    var failure: Error?
    /// Test builds: the loop stops for good when it reads this.
    var hang = false

    var isEmpty: Bool { items.isEmpty && pings.isEmpty && !hang }
}

extension ServerLoop {
    /// The service handles the call in a task; its replies come back through the mailbox.
    /// A descriptor passed with the call is the handler's (PassedDescriptor.current) to take.
    func dispatch(_ call: VarlinkCall, on connection: Connection, descriptor: PassedDescriptor? = nil) {
        connection.busy = true
        let (fd, id, peer, metrics) = (connection.fd, connection.id, connection.peer, self.metrics)
        let service = connection.side?.service ?? self.service
        let held = call.more ? HeldStream(loop: self, fd: fd, id: id) : nil
        let task = Task {
            let replies = EncodedReplies()
            await PassedDescriptor.$current.withValue(descriptor) {
                try? await service.handle(
                    call, peer: peer, send: { replies.append($0) },
                    sendStreamed: { reply in
                        replies.note(reply)
                        // Whatever the call answered before (nothing, usually) goes first.
                        var bytes = replies.take()
                        reply.encode(into: &bytes)
                        guard await self.deliver(bytes, fd: fd, connection: id) else { throw ReplyStreamClosed() }
                    }, streamConnection: held)
            }
            descriptor?.closeUntaken()
            metrics?.calls(method: call.method, error: replies.firstError).increment()
            // A call a broadcast holds goes on without its task.
            if held?.isClaimed != true { self.post(.finished(replies.take()), fd: fd, connection: id) }
        }
        if call.more { connection.stream = task }
    }

    /// From a stream's task: one reply; true once it is on the socket, false
    /// if the connection closed first (gone, too slow, or the server stopped).
    func deliver(_ bytes: [UInt8], fd: CInt, connection: UInt64) async -> Bool {
        await withCheckedContinuation { (written: CheckedContinuation<Bool, Never>) in
            if !post(.streamed(bytes, written: written), fd: fd, connection: connection) {
                written.resume(returning: false)
            }
        }
    }

    @discardableResult
    func post(_ item: Mailbox.Item, fd: CInt, connection: UInt64) -> Bool {
        mailbox.withLock { mailbox in
            guard mailbox.open else { return false }
            if mailbox.isEmpty { ring() }
            mailbox.items.append((fd, connection, item))
            return true
        }
    }

    /// Returns once the loop has come round to it: a hung loop never returns
    /// (the watchdog's health check). Throws if the loop has ended, or ends
    /// before it comes round: a loop that is not turning is never healthy.
    func ping() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let ended = mailbox.withLock { mailbox -> Error? in
                guard mailbox.open else { return mailbox.failure ?? ServerLoopFailed(reason: "stopped") }
                if mailbox.isEmpty { ring() }
                mailbox.pings.append(continuation)
                return nil
            }
            if let ended { continuation.resume(throwing: ended) }
        }
    }

    #if TOKEND_TEST_HOOKS
    /// Test builds only (the watchdog test): the loop's thread stops for good.
    func hangForTesting() {
        mailbox.withLock { mailbox in
            guard mailbox.open else { return }
            if mailbox.isEmpty { ring() }
            mailbox.hang = true
        }
    }
    #endif

    #if TOKEND_TEST_HOOKS
    /// Test builds only: `body`'s result, computed on the loop's thread between events.
    func inspectForTesting<T: Sendable>(_ body: @escaping @Sendable (ServerLoop) -> T) async throws -> T {
        let result = Mutex<T?>(nil)
        let (done, finished) = AsyncStream<Void>.makeStream()
        guard post(.inspect({ loop in
            result.withLock { $0 = body(loop) }
            finished.finish()
        }), fd: -1, connection: 0) else { throw ServerLoopFailed(reason: "stopped") }
        for await _ in done {}
        return try result.withLock { value in
            guard let value else { throw ServerLoopFailed(reason: "stopped") }
            return value
        }
    }
    #endif

    private func ring() {
        var one: UInt64 = 1
        _ = write(mail, &one, 8)
    }

    /// On the loop: everything posted since the last time.
    func deliverMail() {
        var count: UInt64 = 0
        _ = read(mail, &count, 8)
        let (batch, pings, hang) = mailbox.withLock { mailbox in
            defer {
                mailbox.items = []
                mailbox.pings = []
            }
            return (mailbox.items, mailbox.pings, mailbox.hang)
        }
        #if TOKEND_TEST_HOOKS
        if hang {
            logger.critical("server loop hanging on purpose (TOKEND_TEST_HOOKS)")
            while true { sleep(3600) }
        }
        #endif
        for ping in pings { ping.resume() }
        for (fd, id, item) in batch {
            switch item {
            case .publish(let broadcast, let reply, let delivered):
                published(broadcast, reply: reply, delivered: delivered)
                continue
            case .finish(let broadcast, let reply):
                finished(broadcast, reply: reply)
                continue
            case .addSide(let side):
                addSide(side)
                continue
            case .removeSide(let side):
                removeSide(side)
                continue
            #if TOKEND_TEST_HOOKS
            case .inspect(let body):
                body(self)
                continue
            #endif
            default:
                break
            }
            guard let connection = connections[fd], connection.id == id else {
                if case .streamed(_, let written) = item { written.resume(returning: false) }
                continue
            }
            switch item {
            case .finished(let replies): answered(connection, replies: replies)
            case .streamed(let reply, let written): streamed(connection, reply: reply, written: written)
            case .join(let broadcast, let first): joined(connection, to: broadcast, first: first)
            default: break
            }
        }
    }

    /// After the loop ends: nothing more is taken, and waiting pings fail.
    func closeMailbox(failure: Error?) {
        let ended = failure ?? ServerLoopFailed(reason: "stopped")
        let (pings, items) = mailbox.withLock { mailbox in
            mailbox.open = false
            mailbox.failure = ended
            defer {
                mailbox.pings = []
                mailbox.items = []
            }
            return (mailbox.pings, mailbox.items)
        }
        for ping in pings { ping.resume(throwing: ended) }
        for (_, _, item) in items {
            switch item {
            case .streamed(_, let written): written.resume(returning: false)
            case .publish(_, _, let delivered): delivered?()
            case .addSide(let side): closer.close(side.fd, for: side.person)
            default: break
            }
        }
    }
}

/// A call's replies as the service sends them, encoded.
final class EncodedReplies: Sendable {
    private let bytes = Mutex<[UInt8]>([])
    private let error = Mutex<String?>(nil)

    func append(_ reply: VarlinkReply) {
        note(reply)
        bytes.withLock { reply.encode(into: &$0) }
    }

    /// Keeps the first error the call answered: the call's result in the metrics.
    func note(_ reply: VarlinkReply) {
        guard let name = reply.error else { return }
        error.withLock { if $0 == nil { $0 = name } }
    }

    var firstError: String? { error.withLock { $0 } }

    /// The replies so far, leaving none.
    func take() -> [UInt8] {
        bytes.withLock { bytes in
            defer { bytes = [] }
            return bytes
        }
    }
}
