#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Wall-clock time in Unix seconds, and sleeping; injected so tests control time.
public protocol BrokerClock: Sendable {
    func now() -> Double
    /// Sleeps until `deadline` (Unix seconds); throws CancellationError when cancelled.
    func sleep(until deadline: Double) async throws
}

public struct SystemClock: BrokerClock {
    public init() {}

    public func now() -> Double { Date().timeIntervalSince1970 }

    public func sleep(until deadline: Double) async throws {
        // A day at a time: a far deadline never becomes an overflowing Duration.
        while case let seconds = deadline - now(), seconds > 0 {
            try await Task.sleep(for: .milliseconds(Int64(min(seconds, 86_400) * 1000)))
        }
    }
}
