import Config
import TokendMetrics
import UnixServer

/// `metrics-listen`: GET /metrics on a loopback address, served by the
/// server's loop. Like tokend-proxy's TCP mode, it answers programs and not
/// web pages: a page on any site could otherwise make the browser fetch it,
/// or rebind its own name to 127.0.0.1 and read the answer. So the Host must
/// name this listener (the IP literal and port, or localhost and port: what a
/// program connecting here writes, never what a rebound page sends), and a
/// request a browser marks as coming from a page (any Origin, a
/// Sec-Fetch-Site other than `none`) is refused.
struct MetricsRequests: Sendable {
    /// The Host values that name this listener ("127.0.0.1:9464", "localhost:9464").
    let hosts: Set<String>

    init(_ listen: MetricsListen) {
        let literal = listen.host.contains(":") ? "[\(listen.host)]" : listen.host
        hosts = Set([literal, "localhost"].map { "\($0):\(listen.port)" })
    }

    func answer(_ head: HTTPRequestHead, metrics: Metrics) -> HTTPAnswer {
        let host = head.values("Host")
        guard host.count == 1, hosts.contains(host[0].lowercased()) else {
            return HTTPAnswer(
                status: 421, reason: "Misdirected Request",
                body: "the Host must be the address tokend's metrics listen on (\(hosts.sorted().joined(separator: ", ")))\n")
        }
        if let origin = head.values("Origin").first {
            return HTTPAnswer(
                status: 403, reason: "Forbidden", body: "a request from the web page \(origin.prefix(100)) is refused\n")
        }
        if let site = head.values("Sec-Fetch-Site").first(where: { $0 != "none" }) {
            return HTTPAnswer(
                status: 403, reason: "Forbidden", body: "a request a browser marks Sec-Fetch-Site: \(site.prefix(20)) is refused\n")
        }
        guard head.method == "GET" else {
            return HTTPAnswer(status: 405, reason: "Method Not Allowed", body: "only GET /metrics\n")
        }
        let path = head.target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path == "/metrics" else {
            return HTTPAnswer(status: 404, reason: "Not Found", body: "only GET /metrics\n")
        }
        // Prometheus asks for OpenMetrics; curl and promtool get the Prometheus text format.
        let format: Metrics.Format =
            head.values("Accept").contains { $0.contains("application/openmetrics-text") } ? .openMetrics : .prometheus
        return HTTPAnswer(status: 200, reason: "OK", contentType: format.contentType, body: metrics.cachedRender(format))
    }
}

extension Daemon {
    func metricsListener(_ listen: MetricsListen) -> HTTPListener {
        let (requests, metrics) = (MetricsRequests(listen), self.metrics)
        return HTTPListener(host: listen.host, port: listen.port) { head in requests.answer(head, metrics: metrics) }
    }
}
