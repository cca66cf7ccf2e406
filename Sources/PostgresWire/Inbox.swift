import Synchronization

/// The server's messages as they arrive (off the event loop), read one at a time by the task that
/// owns the connection's turn. After a failure the messages already here are read first (a FATAL
/// ErrorResponse before the close), then the failure.
final class Inbox: Sendable {
    private struct State {
        var messages: [BackendMessage] = []
        var waiter: CheckedContinuation<BackendMessage, any Error>?
        var failure: PostgresError?
    }

    private let state = Mutex(State())
    /// Unread messages a server may pile up (it floods, or talks out of turn) before the connection ends.
    let limit: Int

    init(limit: Int = 100_000) {
        self.limit = limit
    }

    /// Queues `message`; false when the queue is full (the caller ends the connection).
    @discardableResult
    func deliver(_ message: BackendMessage) -> Bool {
        var full = false
        let waiter = state.withLock { state -> CheckedContinuation<BackendMessage, any Error>? in
            guard let waiter = state.waiter else {
                full = state.messages.count >= limit
                if !full { state.messages.append(message) }
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: message)
        return !full
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
            defer { state.messages = [] }
            return state.messages
        }
    }

    func receive() async throws -> BackendMessage {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<BackendMessage, PostgresError>? in
                if !state.messages.isEmpty { return .success(state.messages.removeFirst()) }
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
