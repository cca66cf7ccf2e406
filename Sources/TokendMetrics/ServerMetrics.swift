/// The server loop's instruments: calls, connections, subscribers, refusals.
/// Method and error names come from the interfaces served (a call naming
/// anything else counts as `other`), so no peer can add a series.
public final class ServerMetrics: Sendable {
    /// Calls by method, then by result ("ok" or the error's short name).
    let calls: [String: [String: Counter]]
    /// An error's full name → its result label.
    let results: [String: String]
    public let connections: Gauge
    public let accepted: Counter
    public let subscribers: Gauge
    let refusals: [Refusal: Counter]
    let closings: [Closing: Counter]
    let answers: [Int: Counter]
    /// metrics-listen connections closed, still sending their head, to make room for a new one.
    public let evictedHTTP: Counter
    /// The method the loop answers itself (a cached GetToken) and its `ok`
    /// counter: found by comparing the name, without hashing it.
    let hot: (method: String, counter: Counter)?
    public static let httpStatuses = [200, 400, 403, 404, 405, 408, 421, 431, 503]

    /// Why a connection was turned away at accept.
    public enum Refusal: String, Sendable, CaseIterable {
        /// The access policy allows the peer nothing.
        case permission
        /// `max-connections` are open.
        case connections
        /// The peer's person holds `max-connections-per-user`.
        case perUser = "per_user"
    }

    /// Why the server closed a connection it had admitted.
    public enum Closing: String, Sendable, CaseIterable {
        case idle
        case frameTimeout = "frame_timeout"
        case writeTimeout = "write_timeout"
        case malformed
        case tooLarge = "too_large"
        case unreadReplies = "unread_replies"
        case personBudget = "person_budget"
        case replyTooLarge = "reply_too_large"
    }

    /// `methods` and `errors`: qualified names ("io.tokend.Broker.GetToken");
    /// `hot`: the method most calls name, whose `ok` counter is found first.
    public init(_ metrics: Metrics, methods: [String], errors: [String], hot: String? = nil) {
        var results: [String: String] = [:]
        for error in errors { results[error] = String(error.split(separator: ".").last ?? "other") }
        self.results = results
        let labels = ["ok", "other"] + Set(results.values).sorted()
        var calls: [String: [String: Counter]] = [:]
        for method in methods.sorted() + ["other"] {
            var byResult: [String: Counter] = [:]
            for result in labels {
                byResult[result] = metrics.counter(
                    "tokend_varlink_calls", help: "Varlink calls answered, by method and result (ok or the error).",
                    labels: [("method", method), ("result", result)], hiddenAtZero: result != "ok")
            }
            calls[method] = byResult
        }
        self.calls = calls
        self.hot = hot.flatMap { method in calls[method].map { (method, $0["ok"]!) } }
        connections = metrics.gauge("tokend_connections", help: "Connections open on the Varlink socket.")
        accepted = metrics.counter("tokend_connections_accepted", help: "Connections admitted on the Varlink socket.")
        subscribers = metrics.gauge("tokend_subscribers", help: "Subscribe calls open (connections receiving events).")
        var refusals: [Refusal: Counter] = [:]
        for reason in Refusal.allCases {
            refusals[reason] = metrics.counter(
                "tokend_connections_refused", help: "Connections turned away at accept, by reason.",
                labels: [("reason", reason.rawValue)])
        }
        self.refusals = refusals
        var closings: [Closing: Counter] = [:]
        for reason in Closing.allCases {
            closings[reason] = metrics.counter(
                "tokend_connections_closed", help: "Connections the server closed, by reason.",
                labels: [("reason", reason.rawValue)])
        }
        self.closings = closings
        var answers: [Int: Counter] = [:]
        for status in Self.httpStatuses {
            answers[status] = metrics.counter(
                "tokend_metrics_http_requests", help: "Requests to metrics-listen, by the HTTP status answered.",
                labels: [("code", String(status))], hiddenAtZero: status != 200)
        }
        self.answers = answers
        evictedHTTP = metrics.counter(
            "tokend_metrics_http_evicted",
            help: "Connections to metrics-listen closed before their request was whole, to make room for a new one.")
    }

    /// The counter for a method's result: resolved once by code on a hot path
    /// (the loop's cached GetToken), looked up per call elsewhere.
    public func calls(method: String, error: String?) -> Counter {
        if error == nil, let hot, method == hot.method { return hot.counter }
        let byResult = calls[method] ?? calls["other"]!
        guard let error else { return byResult["ok"]! }
        return byResult[results[error] ?? "other"] ?? byResult["other"]!
    }

    public func refused(_ reason: Refusal) { refusals[reason]!.increment() }
    public func closed(_ reason: Closing) { closings[reason]!.increment() }
    public func answeredHTTP(_ status: Int) { (answers[status] ?? answers[400]!).increment() }
    public func value(of reason: Refusal) -> UInt64 { refusals[reason]!.value }
    public func value(of reason: Closing) -> UInt64 { closings[reason]!.value }
}
