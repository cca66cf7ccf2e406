/// When to refresh, as pure functions of the token's times.
public struct RefreshPolicy: Sendable, Equatable {
    /// Seconds before expiry to refresh proactively.
    public var refreshMargin: Int
    /// GetToken never hands out less remaining life than this (by default).
    public var minValid: Int
    /// Assumed lifetime when neither expires_in nor a JWT exp says.
    public var defaultLifetime: Int

    public init(refreshMargin: Int = 60, minValid: Int = 30, defaultLifetime: Int = 300) {
        self.refreshMargin = refreshMargin
        self.minValid = minValid
        self.defaultLifetime = defaultLifetime
    }

    /// The remaining life a cached token must have to be handed out. Capped at
    /// half the token's lifetime: otherwise a minimum longer than the server's
    /// lifetime would make every call refresh.
    public func requiredRemaining(requested: Int?, issuedAt: Int?, expiresAt: Int) -> Int {
        let wanted = max(0, requested ?? minValid)
        guard let issuedAt else { return wanted }
        return min(wanted, max(0, (expiresAt - issuedAt) / 2))
    }

    /// When the proactive refresh should start: `refreshMargin` before expiry
    /// (at most half the lifetime), minus up to 10 % of that lead as jitter so
    /// that many sessions or instances do not refresh in lockstep.
    public func proactiveRefreshAt(issuedAt: Int?, expiresAt: Int, jitter: Double) -> Double {
        var lead = Double(refreshMargin)
        if let issuedAt { lead = min(lead, Double(max(0, expiresAt - issuedAt)) / 2) }
        return Double(expiresAt) - lead - lead * 0.1 * jitter
    }
}
