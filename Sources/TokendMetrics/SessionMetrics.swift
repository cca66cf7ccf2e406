/// One session's instruments, labelled `session="NAME"` (a name from the
/// configuration). Made by `Metrics.session(_:)`; the session's state file
/// carries it, so the actor and its writes reach it.
public final class SessionMetrics: Sendable {
    public let session: String

    // Read from the session's status each time metrics are gathered.
    public let authenticated: Gauge
    public let accessTokenExpiry: Gauge
    let states: [String: Gauge]
    public static let stateNames = ["active", "refreshing", "backingOff", "loginRequired", "loggedOut"]

    // Counted where they happen. The session counts refreshes, coalesced askers and failures for its
    // status in the same step (a copy gathered once a second read 0 right after a stampede of 100).
    public let refreshes: Counter
    public let coalesced: Counter
    public let failures: Counter
    let results: [RefreshResult: Counter]
    public let refreshDuration: Histogram
    let cookies: [CookieChangeKind: Counter]
    let writes: [Bool: Counter]
    public let writeDuration: Histogram
    public let fsyncDuration: Histogram

    /// How a refresh ended.
    public enum RefreshResult: String, Sendable, CaseIterable {
        /// A new token, stored.
        case success
        /// The provider refused the grant: a login is required.
        case rejected
        /// The provider refused tokend's client (invalid_client, unauthorized_client).
        case clientRefused = "client_refused"
        /// No answer, a 5xx, a 429, a malformed body or another transient error: backing off.
        case failed
        /// The fleet's store could not be written, or another host's copy won.
        case store
    }

    public enum CookieChangeKind: String, Sendable, CaseIterable {
        case set, delete, expire
    }

    /// A session's instruments in `metrics` (a registry of their own when none is given: tests).
    public init(session: String, in metrics: Metrics = Metrics()) {
        self.session = session
        let label = [("session", session)]
        authenticated = metrics.gauge(
            "tokend_session_authenticated", help: "1 while the session holds a grant (logged in), else 0.", labels: label)
        accessTokenExpiry = metrics.gauge(
            "tokend_session_access_token_expiry_timestamp_seconds",
            help: "When the current access token expires (Unix time); 0 without one.", labels: label)
        var states: [String: Gauge] = [:]
        for state in Self.stateNames {
            states[state] = metrics.gauge(
                "tokend_session_state", help: "1 for the state the session is in, 0 for the others.",
                labels: label + [("state", state)])
        }
        self.states = states
        refreshes = metrics.counter(
            "tokend_session_refreshes", help: "Refresh requests sent to the token endpoint.", labels: label)
        coalesced = metrics.counter(
            "tokend_session_coalesced",
            help: "Askers served by a refresh another asker started, or by a newer token than the one they named.",
            labels: label)
        failures = metrics.counter(
            "tokend_session_refresh_failures", help: "Refreshes that failed transiently (then backing off).",
            labels: label)
        var results: [RefreshResult: Counter] = [:]
        for result in RefreshResult.allCases {
            results[result] = metrics.counter(
                "tokend_session_refresh_results", help: "Refreshes by how they ended.",
                labels: label + [("result", result.rawValue)])
        }
        self.results = results
        refreshDuration = metrics.histogram(
            "tokend_session_refresh_duration_seconds",
            help: "From sending the refresh request to its outcome: the new token on disk, or the failure.",
            labels: label)
        var cookies: [CookieChangeKind: Counter] = [:]
        for kind in CookieChangeKind.allCases {
            cookies[kind] = metrics.counter(
                "tokend_session_cookie_changes", help: "Cookies set, deleted and expired in the session's jar.",
                labels: label + [("kind", kind.rawValue)])
        }
        self.cookies = cookies
        var writes: [Bool: Counter] = [:]
        for ok in [true, false] {
            writes[ok] = metrics.counter(
                "tokend_state_writes", help: "Durable writes of the session's state file.",
                labels: label + [("result", ok ? "ok" : "failed")])
        }
        self.writes = writes
        writeDuration = metrics.histogram(
            "tokend_state_write_duration_seconds", help: "A whole durable write: temporary file, fsync, rename, fsync of the directory.",
            labels: label)
        fsyncDuration = metrics.histogram(
            "tokend_state_fsync_duration_seconds", help: "The fsync calls of one durable write (file and directory).",
            labels: label)
    }

    /// For the refresh path: how a refresh ended and how long it took (nil: no request was sent).
    public func refreshFinished(_ result: RefreshResult, took: Duration?) {
        results[result]!.increment()
        if let took { refreshDuration.observe(took) }
    }

    public func cookiesChanged(_ kind: CookieChangeKind, count: Int) {
        cookies[kind]!.increment(by: count)
    }

    /// One durable write of the state file, whole and in fsync.
    public func wrote(ok: Bool, took: Duration, fsync: Duration) {
        writes[ok]!.increment()
        guard ok else { return }
        writeDuration.observe(took)
        fsyncDuration.observe(fsync)
    }

    /// What a session's status says, shown as it is.
    public func show(state: String, expiresAt: Int?) {
        authenticated.set(state == "loginRequired" || state == "loggedOut" ? 0 : 1)
        accessTokenExpiry.set(expiresAt ?? 0)
        for (name, gauge) in states { gauge.set(name == state ? 1 : 0) }
    }

    public func value(of result: RefreshResult) -> UInt64 { results[result]!.value }
    public func value(of kind: CookieChangeKind) -> UInt64 { cookies[kind]!.value }
    public func writes(ok: Bool) -> UInt64 { writes[ok]!.value }
}
