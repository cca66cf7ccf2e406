// What counting costs a cached GetToken, measured on the code the server runs:
// TokendMetrics built as a module of its own (as in the daemon), called the way
// the server loop calls it. Prints JSON: CPU nanoseconds per call of each path.
import Glibc
import TokendMetrics

/// Stands in for the loop's Connection: the counter it resolved once, held as an optional.
final class Held {
    var counter: Counter?
}

func cpuNanoseconds() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}

/// The best of `rounds` runs of `count` calls, in CPU ns per call.
func measure(_ count: Int, rounds: Int = 7, _ body: () -> Void) -> Double {
    var best = Double.infinity
    for _ in 0..<rounds {
        let started = cpuNanoseconds()
        for _ in 0..<count { body() }
        best = min(best, Double(cpuNanoseconds() - started) / Double(count))
    }
    return best
}

@main
struct MetricsBench {
    static func main() {
        let metrics = Metrics()
        let server = ServerMetrics(
            metrics, methods: ["io.tokend.Broker.GetToken", "io.tokend.Broker.Refresh", "io.tokend.Broker.GetStatus"],
            errors: ["io.tokend.Broker.LoginRequired"], hot: "io.tokend.Broker.GetToken")
        let held = Held()
        held.counter = server.calls(method: "io.tokend.Broker.GetToken", error: nil)
        let method = String("io.tokend.Broker.GetToken".reversed().reversed())  // not a constant the optimiser can fold
        // The same call again on a connection: the counter it holds, incremented.
        let repeated = measure(20_000_000) { held.counter?.increment() }
        // A call the fast path answers anew: the counter found by method, then incremented.
        let fresh = measure(5_000_000) { server.calls(method: method, error: nil).increment() }
        // Any other method: looked up in the table (calls that go to a task, which costs far more).
        let other = String("io.tokend.Broker.GetStatus".reversed().reversed())
        let lookedUp = measure(2_000_000) { server.calls(method: other, error: nil).increment() }
        // Nothing: the loop's own cost, subtracted from neither (for scale).
        let empty = measure(20_000_000) { held.counter.map { _ = $0 } }
        print(
            #"{"repeated_ns": \#(repeated), "fresh_ns": \#(fresh), "other_ns": \#(lookedUp), "empty_ns": \#(empty), "#
                + #""count": \#(held.counter!.value)}"#)
    }
}
