import NativeMessaging
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// The browser's messages on standard input, read on a thread of their own: a
/// blocking read must not hold one of the concurrency pool's threads.
enum StandardInput {
    /// The messages in order, nil for one over `NativeMessaging.maximumIncoming`
    /// (dropped unread); the stream ends with stdin.
    static func messages() -> AsyncStream<JSONObject?> {
        AsyncStream { continuation in
            var thread = pthread_t()
            let started = pthread_create(
                &thread, nil,
                { argument in
                    let reader = Unmanaged<Reader>.fromOpaque(argument!).takeRetainedValue()
                    StandardInput.relay(into: reader.continuation)
                    return nil
                }, Unmanaged.passRetained(Reader(continuation)).toOpaque())
            precondition(started == 0, "cannot start the thread that reads stdin: \(String(cString: strerror(started)))")
            pthread_detach(thread)
        }
    }

    private final class Reader: Sendable {
        let continuation: AsyncStream<JSONObject?>.Continuation
        init(_ continuation: AsyncStream<JSONObject?>.Continuation) { self.continuation = continuation }
    }

    private static func relay(into continuation: AsyncStream<JSONObject?>.Continuation) {
        while let header = readExactly(4) {
            let length = NativeMessaging.length(header)
            guard length <= NativeMessaging.maximumIncoming else {
                // Too large to take: drop it, say so, and go on with the next message.
                var left = length
                while left > 0, let skipped = readExactly(min(left, 65536)) { left -= skipped.count }
                continuation.yield(nil)
                continue
            }
            guard let body = readExactly(length) else { break }
            continuation.yield((try? JSONParser.parse(body))?.objectValue ?? [:])
        }
        continuation.finish()
    }

    /// Reads exactly `count` bytes from stdin; nil at end of input.
    private static func readExactly(_ count: Int) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let got = buffer[offset...].withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return nil }
            offset += got
        }
        return buffer
    }
}
