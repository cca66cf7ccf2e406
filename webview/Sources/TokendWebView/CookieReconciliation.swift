import TokendInterface

/// One look at the web view's cookie store, worked out against what we last
/// knew of it (the baseline) and tokend's jar: what the site changed goes to
/// tokend, and what the store lacks or has too many is changed to match the
/// jar. Pure: the WebKit calls are the caller's.
struct CookieReconciliation: Equatable {
    /// The site's changes, as Set-Cookie lines per URL, for ImportCookies.
    var imports: [String: [String]] = [:]
    /// The jar with the site's changes taken in: what the store must hold.
    var jar: [CookieKey: Cookie]
    var removals: [Cookie] = []
    var additions: [Cookie] = []
    /// The store had lost everything we knew it held (WebKit's network
    /// process ended, or something emptied it): nothing was taken as deleted.
    var storeWasEmptied = false

    /// Two cookies or more gone at once, and nothing left, is a lost store, not the site's deletions.
    static let lostStoreSize = 2

    init(store: [CookieKey: Cookie], baseline: [CookieKey: Cookie], jar: [CookieKey: Cookie], storeLost: Bool = false) {
        self.jar = jar
        var baseline = baseline
        if storeLost || (store.isEmpty && baseline.count >= Self.lostStoreSize) {
            storeWasEmptied = !baseline.isEmpty || storeLost
            baseline.removeAll()
        }
        for (key, cookie) in store where baseline[key].map({ !$0.sameInStore(as: cookie) }) ?? true {
            if self.jar[key]?.sameInStore(as: cookie) == true { continue }
            self.jar[key] = cookie
            imports[cookie.url, default: []].append(cookie.setCookieHeader())
        }
        for (key, cookie) in baseline where store[key] == nil && self.jar[key] != nil {
            self.jar[key] = nil
            imports[cookie.url, default: []].append(cookie.setCookieHeader(removed: true))
        }
        removals = store.values.filter { self.jar[$0.key] == nil }.sorted { $0.name < $1.name }
        additions = self.jar.values.filter { store[$0.key]?.sameInStore(as: $0) != true }.sorted { $0.name < $1.name }
    }
}
