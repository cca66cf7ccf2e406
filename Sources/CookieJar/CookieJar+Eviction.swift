extension CookieJar {
    /// The cookies to remove so that `newcomer` fits the per-domain and total
    /// limits, in RFC 6265bis §5.7's order: expired cookies, then non-Secure
    /// cookies (of the crowded domain for its limit), then Secure ones, each
    /// tier oldest-created first (the jar records no access times, so creation
    /// order stands for last access). The newcomer itself is never chosen.
    /// A newcomer from a non-secure origin never pushes out a Secure cookie:
    /// when only Secure cookies could make room, the answer is nil and the
    /// newcomer is refused — else an http origin could flush a Secure cookie
    /// out and then set its own of that name.
    func evictions(toAdmit newcomer: Cookie, secureOrigin: Bool, now: Int) -> [Cookie]? {
        let crowded = { (cookie: Cookie) in cookie.domain == newcomer.domain }
        guard cookies.filter(crowded).count + 1 > policy.maximumPerDomain || cookies.count + 1 > policy.maximumTotal
        else { return [] }
        var evicted = cookies.filter { $0.isExpired(now: now) }
        var kept = cookies.filter { !$0.isExpired(now: now) }.sorted { $0.creationIndex < $1.creationIndex }
        /// Evicts `excess` cookies among those `eligible`, non-Secure first.
        func evict(_ excess: Int, among eligible: (Cookie) -> Bool) -> Bool {
            var excess = excess
            for secureTier in secureOrigin ? [false, true] : [false] {
                while excess > 0, let index = kept.firstIndex(where: { eligible($0) && $0.secure == secureTier }) {
                    evicted.append(kept.remove(at: index))
                    excess -= 1
                }
            }
            return excess <= 0
        }
        guard evict(kept.filter(crowded).count + 1 - policy.maximumPerDomain, among: crowded),
            evict(kept.count + 1 - policy.maximumTotal, among: { _ in true })
        else { return nil }
        return evicted
    }
}
