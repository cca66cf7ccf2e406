/// The two text formats, written from one registry. They differ in a
/// counter's family name (OpenMetrics: `name`, samples `name_total`;
/// Prometheus 0.0.4: `name_total` throughout), in `# UNIT` and in `# EOF`.
enum Exposition {
    static func write(_ family: Metrics.Family, format: Metrics.Format, into out: inout String) {
        let shown = family.children.filter { child in
            guard child.hiddenAtZero else { return true }
            switch child.instrument {
            case .counter(let counter): return counter.value > 0
            case .histogram(let histogram): return histogram.count > 0
            case .gauge: return true
            }
        }
        guard !shown.isEmpty else { return }
        let described = family.kind == .counter && format == .prometheus ? family.name + "_total" : family.name
        switch format {
        case .openMetrics:
            out += "# TYPE \(described) \(family.kind.rawValue)\n"
            if let unit = family.unit { out += "# UNIT \(described) \(unit)\n" }
            out += "# HELP \(described) \(family.help)\n"
        case .prometheus:
            out += "# HELP \(described) \(family.help)\n"
            out += "# TYPE \(described) \(family.kind.rawValue)\n"
        }
        for child in shown {
            switch child.instrument {
            case .counter(let counter):
                sample(family.name + "_total", child.text, String(counter.value), into: &out)
            case .gauge(let gauge):
                sample(family.name, child.text, number(gauge.value), into: &out)
            case .histogram(let histogram):
                let (cumulative, sum, count) = histogram.snapshot()
                let separator = child.text.isEmpty ? "" : ","
                for (bound, running) in zip(histogram.bounds, cumulative) {
                    sample(family.name + "_bucket", child.text + separator + "le=\"\(number(bound))\"", String(running), into: &out)
                }
                sample(family.name + "_bucket", child.text + separator + "le=\"+Inf\"", String(count), into: &out)
                sample(family.name + "_count", child.text, String(count), into: &out)
                sample(family.name + "_sum", child.text, number(sum), into: &out)
            }
        }
    }

    static func sample(_ name: String, _ labels: String, _ value: String, into out: inout String) {
        out += name
        if !labels.isEmpty { out += "{\(labels)}" }
        out += " \(value)\n"
    }

    /// Integers without a fraction (timestamps, counts kept as gauges); others
    /// as Swift writes a Double, which both formats read (`0.25`, `1e-05`).
    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 9.007_199_254_740_992e15 { return String(Int64(value)) }
        return value.description
    }
}
