import Synchronization

/// The server's messages as they arrive (off the event loop), read one at a time by the task that
/// owns the connection's turn. After a failure the messages already here are read first (a FATAL
/// ErrorResponse before the close), then the failure.
///
/// What a server may leave unread is bounded in count and bytes, and while no statement is running
/// it may say nothing here but an ErrorResponse (a FATAL one before it closes): anything else, and
/// the caller ends the connection.
final class Inbox: Sendable {
    private struct State {
        var messages: [BackendMessage] = []
        var bytes = 0
        var waiter: CheckedContinuation<BackendMessage, any Error>?
        var failure: PostgresError?
        /// A statement (or startup) is running: its answers are expected, until ReadyForQuery.
        var expecting = true
    }

    private let state = Mutex(State())
    /// Unread messages a server may pile up (it floods, or talks out of turn) before the connection ends.
    let limit: Int
    /// Their bytes: a few MiB beyond what one statement's result may hold.
    let byteLimit: Int

    init(limit: Int = 100_000, byteLimit: Int = PostgresConnection.resultLimit + (4 << 20)) {
        self.limit = limit
        self.byteLimit = byteLimit
    }

    /// A statement was sent: its answers are expected until its ReadyForQuery.
    func expectAnswers() {
        state.withLock { $0.expecting = true }
    }

    /// Queues `message`; the reason to end the connection when the server talks out of turn or
    /// piles up more than the inbox holds (the caller ends it).
    func deliver(_ message: BackendMessage) -> PostgresError? {
        var refusal: PostgresError?
        let waiter = state.withLock { state -> CheckedContinuation<BackendMessage, any Error>? in
            // The connection is ending: nothing more is read.
            guard state.failure == nil else { return nil }
            guard state.expecting || message.serverError != nil else {
                refusal = PostgresError(.protocolViolation, "the server sent \(message.name) while no statement was running")
                return nil
            }
            if case .readyForQuery = message { state.expecting = false }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            let size = message.size
            guard state.messages.count < limit, state.bytes + size <= byteLimit else {
                refusal = PostgresError(.protocolViolation, "the server sent more than \(limit) messages or \(byteLimit) bytes unread")
                return nil
            }
            state.messages.append(message)
            state.bytes += size
            return nil
        }
        waiter?.resume(returning: message)
        return refusal
    }

    /// The first failure is the one said; later ones (the close after a TLS error) add nothing.
    func fail(_ error: PostgresError) {
        let waiter = state.withLock { state -> CheckedContinuation<BackendMessage, any Error>? in
            if state.failure == nil { state.failure = error }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(throwing: state.withLock { $0.failure } ?? error)
    }

    var failure: PostgresError? { state.withLock { $0.failure } }

    /// What arrived while nobody was reading: between statements the server has nothing to say but
    /// a FATAL error before it closes.
    func takeUnread() -> [BackendMessage] {
        state.withLock { state in
            defer {
                state.messages = []
                state.bytes = 0
            }
            return state.messages
        }
    }

    func receive() async throws -> BackendMessage {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<BackendMessage, PostgresError>? in
                if !state.messages.isEmpty {
                    let message = state.messages.removeFirst()
                    state.bytes -= message.size
                    return .success(message)
                }
                if let failure = state.failure { return .failure(failure) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}

/// One statement at a time on a connection, in the order asked (a FIFO async lock).
final class Turnstile: Sendable {
    private let state = Mutex<(busy: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func enter() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}

/// Streams of notifications, by channel, fed from the event loop.
final class Listeners: Sendable {
    typealias Stream = AsyncThrowingStream<PostgresNotification, any Error>

    private struct State {
        var next = 0
        var streams: [Int: (channel: String, continuation: Stream.Continuation)] = [:]
        var ended: PostgresError?
    }

    private let state = Mutex(State())

    /// A stream of `channel`'s notifications; a reader that falls behind loses the oldest.
    func add(_ channel: String) -> (Int, Stream) {
        let (stream, continuation) = Stream.makeStream(bufferingPolicy: .bufferingNewest(1024))
        let (id, ended) = state.withLock { state -> (Int, PostgresError?) in
            state.next += 1
            if state.ended == nil { state.streams[state.next] = (channel, continuation) }
            return (state.next, state.ended)
        }
        if let ended { continuation.finish(throwing: ended) }
        continuation.onTermination = { [weak self] _ in self?.remove(id) }
        return (id, stream)
    }

    func remove(_ id: Int) {
        _ = state.withLock { $0.streams.removeValue(forKey: id) }
    }

    func deliver(_ notification: PostgresNotification) {
        let targets = state.withLock { $0.streams.values.filter { $0.channel == notification.channel } }
        for target in targets { target.continuation.yield(notification) }
    }

    func end(_ error: PostgresError) {
        let all = state.withLock { state -> [Stream.Continuation] in
            if state.ended == nil { state.ended = error }
            defer { state.streams = [:] }
            return state.streams.values.map(\.continuation)
        }
        for continuation in all { continuation.finish(throwing: error) }
    }
}
