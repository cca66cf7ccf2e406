import NIOCore
import Synchronization

/// A request body on its way from the client to the upstream, one chunk at
/// a time: `send` returns once the upstream side has taken the chunk, so a
/// large upload never piles up in the proxy's memory. Closed by the upstream
/// side (it finished or failed), `send` returns false at once and the rest
/// is dropped. Aborted by the client side (it went away or stalled), the
/// upstream side's read fails, and so does the upstream request.
final class BodyPipe: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    private struct State {
        var chunk: ByteBuffer?
        var ended = false
        var aborted = false
        var closed = false
        var producer: CheckedContinuation<Bool, Never>?
        var consumer: CheckedContinuation<ByteBuffer?, any Error>?
    }
    private let state = Mutex(State())

    /// True once the upstream side took `chunk`; false if it stopped reading.
    func send(_ chunk: ByteBuffer) async -> Bool {
        await withCheckedContinuation { (producer: CheckedContinuation<Bool, Never>) in
            let (consumer, refused) = state.withLock { state -> (CheckedContinuation<ByteBuffer?, any Error>?, Bool) in
                if state.closed { return (nil, true) }
                if let consumer = state.consumer {
                    state.consumer = nil
                    return (consumer, false)
                }
                state.chunk = chunk
                state.producer = producer
                return (nil, false)
            }
            if refused { return producer.resume(returning: false) }
            if let consumer {
                consumer.resume(returning: chunk)
                producer.resume(returning: true)
            }
        }
    }

    /// The client's body is complete.
    func end() {
        let consumer = state.withLock { state -> CheckedContinuation<ByteBuffer?, any Error>? in
            state.ended = true
            defer { state.consumer = nil }
            return state.consumer
        }
        consumer?.resume(returning: nil)
    }

    /// The client's body will never be complete: the upstream side's waiting and every later read fails.
    func abort() {
        let consumer = state.withLock { state -> CheckedContinuation<ByteBuffer?, any Error>? in
            state.aborted = true
            state.chunk = nil
            defer { state.consumer = nil }
            return state.consumer
        }
        consumer?.resume(throwing: ClientGone())
    }

    /// The upstream side stopped reading: a waiting and every later `send` returns false.
    func close() {
        let producer = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.closed = true
            state.chunk = nil
            defer { state.producer = nil }
            return state.producer
        }
        producer?.resume(returning: false)
    }

    func next() async throws -> ByteBuffer? {
        try await withCheckedThrowingContinuation { (consumer: CheckedContinuation<ByteBuffer?, any Error>) in
            let (chunk, producer, done, aborted) = state.withLock {
                state -> (ByteBuffer?, CheckedContinuation<Bool, Never>?, Bool, Bool) in
                if state.aborted { return (nil, nil, true, true) }
                if let chunk = state.chunk {
                    state.chunk = nil
                    defer { state.producer = nil }
                    return (chunk, state.producer, false, false)
                }
                if state.ended || state.closed { return (nil, nil, true, false) }
                state.consumer = consumer
                return (nil, nil, false, false)
            }
            if aborted {
                consumer.resume(throwing: ClientGone())
            } else if let chunk {
                consumer.resume(returning: chunk)
                producer?.resume(returning: true)
            } else if done {
                consumer.resume(returning: nil)
            }
        }
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let pipe: BodyPipe
        mutating func next() async throws -> ByteBuffer? { try await pipe.next() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pipe: self) }
}
