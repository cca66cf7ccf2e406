import Config
import HTTPHead
import TokendMetrics
import UnixServer

/// `metrics-listen`: GET /metrics on a loopback address, served by the
/// server's loop. Like tokend-proxy's TCP mode, it answers programs and not
/// web pages, by the same rule (HTTPHead's `WebPageRule`): a page on any site
/// could otherwise make the browser fetch it, or rebind its own name to
/// 127.0.0.1 and read the answer. So the Host must name this listener (the IP
/// literal and port, or localhost and port), and a request a browser marks as
/// coming from another page (an Origin, a Sec-Fetch-Site other than `none` or
/// `same-origin`) is refused.
struct MetricsRequests: Sendable {
    let pages: WebPageRule

    init(_ listen: MetricsListen) {
        pages = WebPageRule(listener: "tokend's metrics listener", ip: listen.host, port: listen.port)
    }

    func answer(_ head: HTTPRequestHead, metrics: Metrics) -> HTTPAnswer {
        if let refusal = pages.refusal(for: head) {
            return HTTPAnswer(status: refusal.status, body: refusal.message + "\n")
        }
        guard head.syntax.method == .get else {
            return HTTPAnswer(status: 405, reason: "Method Not Allowed", body: "only GET /metrics\n")
        }
        guard head.path == "/metrics" else {
            return HTTPAnswer(status: 404, reason: "Not Found", body: "only GET /metrics\n")
        }
        // Prometheus asks for OpenMetrics; curl and promtool get the Prometheus text format.
        let openMetrics = head.values("Accept").contains { $0.firstRange(of: "application/openmetrics-text") != nil }
        let format: Metrics.Format = openMetrics ? .openMetrics : .prometheus
        return HTTPAnswer(status: 200, reason: "OK", contentType: format.contentType, body: metrics.cachedRender(format))
    }
}

extension Daemon {
    func metricsListener(_ listen: MetricsListen) -> HTTPListener {
        let (requests, metrics) = (MetricsRequests(listen), self.metrics)
        return HTTPListener(host: listen.host, port: listen.port) { head in requests.answer(head, metrics: metrics) }
    }
}
