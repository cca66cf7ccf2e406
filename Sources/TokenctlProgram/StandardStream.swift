#if canImport(Glibc)
import Glibc
#endif

/// tokenctl's standard output and error, written with write(2) as they come: nothing buffered, so
/// a line written here keeps its place among `print`'s (which flush at each newline on a terminal).
enum StandardStream: Int32 {
    case output = 1
    case error = 2

    /// Writes all of `text`; a stream that is closed or broken takes nothing, and that is not an error
    /// worth more than the message itself.
    func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(rawValue, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }
}
