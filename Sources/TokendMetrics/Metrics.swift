/// tokend's counters, gauges and histograms: one registry per daemon, rendered
/// in the OpenMetrics text format for GetMetrics, the textfile and /metrics.
public final class Metrics: Sendable {
    public init() {}

    /// The whole registry in the OpenMetrics text format, ending with `# EOF`.
    public func render() -> String {
        "# EOF\n"
    }
}
