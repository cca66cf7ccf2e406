import OAuth
import StateStore

extension SessionActor {
    // MARK: Proactive refresh of keys

    /// Plans the next keyed refresh: the earliest key due, never before the
    /// backoff allows. Keys due together still go one at a time (their turns).
    func rescheduleKeys() {
        keyScheduler?.cancel()
        keyScheduler = nil
        guard record.phase == .active, record.refreshToken != nil, !stopping else { return }
        var earliest: Double?
        for held in record.keyedTokens {
            let key = TokenKey(resource: held.resource, scope: held.scope)
            guard keyedInFlight[key] == nil else { continue }
            let due = keyDue[key]
                ?? policy.proactiveRefreshAt(issuedAt: held.lastRefreshAt, expiresAt: held.expiresAt, jitter: random())
            keyDue[key] = due
            earliest = min(earliest ?? due, due)
        }
        guard var at = earliest else { return }
        if let retryAt = backoff.nextAttemptAt { at = max(at, retryAt) }
        keyScheduler = wake(at: at) { await $0.proactiveKeyedRefresh() }
    }

    func proactiveKeyedRefresh() async {
        guard !Task.isCancelled else { return }  // a reschedule replaced this wake (see proactiveRefresh)
        keyScheduler = nil
        guard record.phase == .active, !stopping else { return }
        forgetIdleKeys()
        let now = clock.now()
        let due = keyDue.filter { $0.value <= now && keyedInFlight[$0.key] == nil && keyedToken($0.key) != nil }
        guard let (key, _) = due.min(by: { $0.value < $1.value }) else {
            rescheduleKeys()
            return
        }
        _ = try? await joinOrStartKeyedRefresh(key, countAsCoalesced: false)
        if keyScheduler == nil { rescheduleKeys() }
    }

    /// The fast path's copy of the keyed tokens (nothing while stopping or not active).
    func updateKeyedSnapshots() {
        // A key gone from the TPM hands out no token, not even a cached one (as the session's own).
        let live = stopping || record.phase != .active || proofKeyGone ? [] : record.keyedTokens
        keyedSnapshots.set(
            live.map { (TokenKey(resource: $0.resource, scope: $0.scope), token(of: $0), $0.lastRefreshAt) },
            sharing: strategy == .sharedAudience && !record.grantResources.isEmpty
                ? Set(record.grantResources).intersection(keyPolicy.resources) : nil)
    }

    /// Keyed tokens the configuration no longer allows (a resource removed, a
    /// narrower session scope) are not served or refreshed.
    func dropKeysNoLongerAllowed() {
        let allowedScope = TokenKey.tokens(keyPolicy.scope ?? record.scope)
        let stale = record.keyedTokens.filter { held in
            if let resource = held.resource, !keyPolicy.resources.contains(resource) { return true }
            if let scope = held.scope, !TokenKey.tokens(scope).isSubset(of: allowedScope) { return true }
            return false
        }
        forget(stale.map { TokenKey(resource: $0.resource, scope: $0.scope) }, why: "no longer allowed by tokend.toml")
    }
}
