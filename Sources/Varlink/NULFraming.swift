/// Finding NUL-terminated frames in received bytes: the one frame scanner,
/// used by the server's loop, the clients' decoders and the fuzzer (no I/O).
public enum NULFraming {
    public enum Scan: Equatable, Sendable {
        /// A whole frame of this many bytes (the NUL follows it).
        case frame(length: Int)
        /// No NUL yet; the bytes up to `scanned` need not be searched again.
        case incomplete(scanned: Int)
        /// The frame (complete or not) exceeds the limit.
        case tooLarge
    }

    /// Searches `bytes` for a NUL from `scanned` on.
    public static func scan(_ bytes: UnsafeRawBufferPointer, scanned: Int, limit: Int) -> Scan {
        let start = min(scanned, bytes.count)
        guard let base = bytes.baseAddress, start < bytes.count,
            let hit = memchr(base + start, 0, bytes.count - start)
        else {
            return bytes.count > limit ? .tooLarge : .incomplete(scanned: bytes.count)
        }
        let length = UnsafeRawPointer(hit) - base
        return length > limit ? .tooLarge : .frame(length: length)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
