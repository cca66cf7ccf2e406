import Synchronization

/// tokend's counters, gauges and histograms: one registry per daemon, rendered
/// in the OpenMetrics text format for GetMetrics and /metrics, and in the
/// Prometheus text format (0.0.4) for node_exporter's textfile collector and
/// for scrapers that do not ask for OpenMetrics.
///
/// Instruments are made once, with their labels, when what they count comes
/// into being (the server, a session); counting is then an atomic add on an
/// object the counting code already holds: no look-up, no string, no lock.
/// Labels come from the configuration (session names) and from fixed lists
/// (methods of the interface, endpoints, reasons): never from a peer or a provider.
public final class Metrics: Sendable {
    public enum Format: Sendable {
        /// OpenMetrics 1.0: `# TYPE name counter` with `name_total` samples, `# UNIT`, `# EOF`.
        case openMetrics
        /// The Prometheus text format 0.0.4: what node_exporter's textfile
        /// collector and `promtool check metrics` read.
        case prometheus

        public var contentType: String {
            switch self {
            case .openMetrics: "application/openmetrics-text; version=1.0.0; charset=utf-8"
            case .prometheus: "text/plain; version=0.0.4; charset=utf-8"
            }
        }
    }

    enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    enum Instrument: Sendable {
        case counter(Counter)
        case gauge(Gauge)
        case histogram(Histogram)
    }

    struct Child: Sendable {
        let labels: [(name: String, value: String)]
        /// `name="value",…`, escaped once when the child is made.
        let text: String
        let instrument: Instrument
        /// A child whose count is still zero is left out (most endpoint × status pairs never happen).
        let hiddenAtZero: Bool
    }

    struct Family: Sendable {
        let name: String
        let kind: Kind
        let help: String
        var children: [Child] = []

        /// The unit OpenMetrics names in `# UNIT`, from the name's suffix.
        var unit: String? {
            for unit in ["seconds", "bytes"] where name.hasSuffix("_" + unit) { return unit }
            return nil
        }
    }

    struct Registry {
        var families: [Family] = []
        var index: [String: Int] = [:]
        var sessions: [String: SessionMetrics] = [:]
    }

    private let registry = Mutex(Registry())
    /// The last rendering of each format and when it was made (`cachedRender`).
    private let renderings = Mutex<[Format: (at: ContinuousClock.Instant, text: String)]>([:])

    public init() {}

    /// The counter `name` (without `_total`) with these labels; the same one
    /// each time it is asked for with the same labels.
    public func counter(
        _ name: String, help: String, labels: [(String, String)] = [], hiddenAtZero: Bool = false
    ) -> Counter {
        let made = instrument(name, .counter, help: help, labels: labels, hiddenAtZero: hiddenAtZero) {
            .counter(Counter())
        }
        guard case .counter(let counter) = made else { preconditionFailure("\(name) is not a counter") }
        return counter
    }

    public func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Gauge {
        let made = instrument(name, .gauge, help: help, labels: labels, hiddenAtZero: false) { .gauge(Gauge()) }
        guard case .gauge(let gauge) = made else { preconditionFailure("\(name) is not a gauge") }
        return gauge
    }

    public func histogram(
        _ name: String, help: String, labels: [(String, String)] = [], bounds: [Double] = Histogram.secondsBounds,
        hiddenAtZero: Bool = false
    ) -> Histogram {
        let made = instrument(name, .histogram, help: help, labels: labels, hiddenAtZero: hiddenAtZero) {
            .histogram(Histogram(bounds: bounds))
        }
        guard case .histogram(let histogram) = made else { preconditionFailure("\(name) is not a histogram") }
        return histogram
    }

    private func instrument(
        _ name: String, _ kind: Kind, help: String, labels: [(String, String)], hiddenAtZero: Bool,
        make: () -> Instrument
    ) -> Instrument {
        precondition(Self.isName(name) && !name.hasSuffix("_total"), "metric name \(name)")
        precondition(!help.contains(where: { $0 == "\\" || $0 == "\"" || $0 == "\n" }), "help of \(name)")
        let text = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",")
        return registry.withLock { registry in
            let position: Int
            if let known = registry.index[name] {
                position = known
                precondition(registry.families[known].kind == kind, "\(name) registered as another kind")
            } else {
                position = registry.families.count
                registry.index[name] = position
                registry.families.append(Family(name: name, kind: kind, help: help))
            }
            if let child = registry.families[position].children.first(where: { $0.text == text }) {
                return child.instrument
            }
            let instrument = make()
            registry.families[position].children.append(
                Child(labels: labels.map { (name: $0.0, value: $0.1) }, text: text, instrument: instrument,
                    hiddenAtZero: hiddenAtZero))
            return instrument
        }
    }

    /// One session's instruments; the same ones again for the same name (a
    /// session made anew on reload keeps counting where it was).
    public func session(_ name: String) -> SessionMetrics {
        if let known = registry.withLock({ $0.sessions[name] }) { return known }
        let made = SessionMetrics(session: name, in: self)
        return registry.withLock { registry in
            if let known = registry.sessions[name] { return known }
            registry.sessions[name] = made
            return made
        }
    }

    /// A session removed from the configuration: its series go.
    public func forget(session name: String) {
        registry.withLock { registry in
            registry.sessions[name] = nil
            for index in registry.families.indices {
                registry.families[index].children.removeAll { child in
                    child.labels.contains { $0.name == "session" && $0.value == name }
                }
            }
        }
    }

    /// The names a scraper sees: counters with `_total`, the others as registered.
    public var exportedNames: [String] {
        registry.withLock { $0.families.map { $0.kind == .counter ? $0.name + "_total" : $0.name } }
    }

    /// Every family with the children it shows, in the order they were registered.
    public func render(_ format: Format = .openMetrics) -> String {
        let families = registry.withLock { $0.families }
        var out = ""
        out.reserveCapacity(families.count * 256)
        for family in families {
            Exposition.write(family, format: format, into: &out)
        }
        if format == .openMetrics { out += "# EOF\n" }
        return out
    }

    /// `render(format)`, made again at most once per `maxAge`: a flood of
    /// scrapes costs one rendering a second on the loop that serves them,
    /// and a scraper sees values at most that old.
    public func cachedRender(
        _ format: Format = .openMetrics, maxAge: Duration = .seconds(1), now: ContinuousClock.Instant = .now
    ) -> String {
        if let last = renderings.withLock({ $0[format] }), now - last.at < maxAge, now >= last.at { return last.text }
        let text = render(format)
        renderings.withLock { $0[format] = (now, text) }
        return text
    }

    static func isName(_ name: String) -> Bool {
        guard let first = name.utf8.first, first != UInt8(ascii: "_"), !(0x30...0x39).contains(first) else { return false }
        return name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
    }

    /// A label value as both formats quote it: backslash, double quote and line feed escaped.
    static func escape(_ value: String) -> String {
        guard value.contains(where: { $0 == "\\" || $0 == "\"" || $0 == "\n" }) else { return value }
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
