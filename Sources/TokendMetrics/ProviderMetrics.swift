/// Answers from a session's provider, by endpoint and HTTP status. A status
/// outside the usual ones counts in its class ("4xx"); no answer at all
/// (connection refused, timeout, TLS) is "error".
public final class ProviderMetrics: Sendable {
    public enum Endpoint: String, Sendable, CaseIterable {
        case token, revocation, discovery, jwks, userinfo
        case deviceAuthorization = "device_authorization"
        case pushedAuthorization = "pushed_authorization"
        case other
    }

    static let statuses = [200, 201, 204, 301, 302, 303, 307, 308, 400, 401, 403, 404, 405, 408, 409, 429, 500, 502, 503, 504]
    static let statusLabels = statuses.map(String.init) + ["1xx", "2xx", "3xx", "4xx", "5xx", "error"]

    let answers: [Endpoint: [String: Counter]]
    let durations: [Endpoint: Histogram]

    public init(session: String, in metrics: Metrics = Metrics()) {
        var answers: [Endpoint: [String: Counter]] = [:]
        var durations: [Endpoint: Histogram] = [:]
        for endpoint in Endpoint.allCases {
            let labels = [("session", session), ("endpoint", endpoint.rawValue)]
            var byStatus: [String: Counter] = [:]
            for status in Self.statusLabels {
                byStatus[status] = metrics.counter(
                    "tokend_provider_responses",
                    help: "Answers from the provider by endpoint and HTTP status (error: none came).",
                    labels: labels + [("code", status)], hiddenAtZero: true)
            }
            answers[endpoint] = byStatus
        }
        for endpoint in Endpoint.allCases where endpoint != .other {
            durations[endpoint] = metrics.histogram(
                "tokend_provider_request_duration_seconds", help: "From sending a request to the provider to its whole answer.",
                labels: [("session", session), ("endpoint", endpoint.rawValue)], hiddenAtZero: true)
        }
        self.answers = answers
        self.durations = durations
    }

    /// One exchange: `status` nil when no answer came.
    public func answered(_ endpoint: Endpoint, status: Int?, took: Duration) {
        answers[endpoint]![Self.label(status)]!.increment()
        durations[endpoint]?.observe(took)
    }

    public func value(_ endpoint: Endpoint, status: Int?) -> UInt64 {
        answers[endpoint]![Self.label(status)]!.value
    }

    static func label(_ status: Int?) -> String {
        guard let status else { return "error" }
        if statuses.contains(status) { return String(status) }
        guard (100...599).contains(status) else { return "error" }
        return "\(status / 100)xx"
    }
}
