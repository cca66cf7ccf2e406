import Synchronization

/// A count that only goes up: one relaxed atomic add per event, no lock and
/// no allocation, so that counting on the fast path costs nanoseconds.
public final class Counter: Sendable {
    private let count = Atomic<UInt64>(0)

    public init() {}

    public func increment() {
        count.wrappingAdd(1, ordering: .relaxed)
    }

    public func increment(by amount: Int) {
        guard amount > 0 else { return }
        count.wrappingAdd(UInt64(amount), ordering: .relaxed)
    }

    public var value: UInt64 { count.load(ordering: .relaxed) }
}

/// A value that goes up and down (connections open, a token's expiry).
public final class Gauge: Sendable {
    private let bits = Atomic<UInt64>(0)

    public init() {}

    public func set(_ value: Double) {
        bits.store(value.bitPattern, ordering: .relaxed)
    }

    public func set(_ value: Int) { set(Double(value)) }

    public func add(_ delta: Double) {
        var current = bits.load(ordering: .relaxed)
        while true {
            let next = (Double(bitPattern: current) + delta).bitPattern
            let (exchanged, original) = bits.compareExchange(
                expected: current, desired: next, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    public var value: Double { Double(bitPattern: bits.load(ordering: .relaxed)) }
}

/// How long things take, in cumulative buckets. Observed rarely (a refresh,
/// a state write, a fleet lock): a short lock is cheaper to read than many atomics.
public final class Histogram: Sendable {
    /// Upper bounds, ascending; `+Inf` is implied.
    public let bounds: [Double]
    private let state: Mutex<State>

    struct State {
        var buckets: [UInt64]
        var sum = 0.0
        var count: UInt64 = 0
    }

    /// Seconds, from a fast local fsync (100 µs) to a slow provider (30 s).
    public static let secondsBounds: [Double] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    public init(bounds: [Double] = Histogram.secondsBounds) {
        self.bounds = bounds.sorted()
        state = Mutex(State(buckets: Array(repeating: 0, count: bounds.count)))
    }

    public func observe(_ value: Double) {
        guard !value.isNaN else { return }
        let index = bounds.firstIndex { value <= $0 }
        state.withLock { state in
            if let index { state.buckets[index] &+= 1 }
            state.sum += value
            state.count &+= 1
        }
    }

    public func observe(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        observe(Double(seconds) + Double(attoseconds) / 1e18)
    }

    /// Cumulative counts per bound, then the sum and the count (the `+Inf` bucket).
    public var count: UInt64 { state.withLock { $0.count } }

    public func snapshot() -> (cumulative: [UInt64], sum: Double, count: UInt64) {
        state.withLock { state in
            var running: UInt64 = 0
            let cumulative = state.buckets.map { count -> UInt64 in
                running &+= count
                return running
            }
            return (cumulative, state.sum, state.count)
        }
    }
}
