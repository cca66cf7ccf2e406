import TokendInterface

/// One look at the web view's cookie store, worked out against what the store
/// was last made to hold (the baseline) and tokend's jar: what the site changed
/// goes to tokend, and what the store lacks or has too many is changed to match
/// the jar. Pure: the WebKit calls are the caller's.
struct CookieReconciliation: Equatable {
    /// The site's changes, as Set-Cookie lines per URL, for ImportCookies.
    var imports: [String: [String]] = [:]
    /// The site's changes the import rule refuses: for another host than a web
    /// origin's (a parent domain, say). The store goes back to the jar's cookie.
    var refused: [Cookie] = []
    /// The jar with the site's changes taken in: what the store must hold.
    var jar: [CookieKey: Cookie]
    var removals: [Cookie] = []
    var additions: [Cookie] = []
    /// WebKit's network process ended, and its store with it: nothing missing is taken as deleted.
    var storeWasEmptied = false

    /// A store that is merely empty is the site's doing (its logout clears every
    /// cookie it has); a lost store is known only from `storeLost`, the network process's end.
    init(store: [CookieKey: Cookie], baseline: [CookieKey: Cookie], jar: [CookieKey: Cookie], rule: CookieImportRule,
         storeLost: Bool = false) {
        self.jar = jar
        let baseline = storeLost ? [:] : baseline
        storeWasEmptied = storeLost
        for (key, cookie) in store where baseline[key].map({ !$0.sameInStore(as: cookie) }) ?? true {
            if self.jar[key]?.sameInStore(as: cookie) == true || refuses(cookie, rule) { continue }
            self.jar[key] = cookie
            imports[cookie.url, default: []].append(cookie.setCookieHeader())
        }
        for (key, cookie) in baseline where store[key] == nil && self.jar[key] != nil {
            if refuses(cookie, rule) { continue }
            self.jar[key] = nil
            imports[cookie.url, default: []].append(cookie.setCookieHeader(removed: true))
        }
        removals = store.values.filter { self.jar[$0.key] == nil }.sorted { $0.name < $1.name }
        additions = self.jar.values.filter { store[$0.key]?.sameInStore(as: $0) != true }.sorted { $0.name < $1.name }
    }

    private mutating func refuses(_ cookie: Cookie, _ rule: CookieImportRule) -> Bool {
        if rule.allows(url: cookie.url) { return false }
        refused.append(cookie)
        return true
    }
}

/// What the web view knows of cookies between reconciles: tokend's jar as last
/// heard, and what the store was made to hold.
struct CookieMirror {
    var jar: [CookieKey: Cookie] = [:]
    /// What the last reconcile made the store hold: a cookie missing from the
    /// store later is a deletion only if it is here.
    var baseline: [CookieKey: Cookie] = [:]
    /// Set when WebKit's network process ended: its store, and our cookies in it, are gone.
    var storeLost = false

    /// Starts a reconcile against what the store holds now; the site's changes are in the jar at once.
    mutating func reconcile(store: [CookieKey: Cookie], rule: CookieImportRule) -> CookieReconciliation {
        let work = CookieReconciliation(store: store, baseline: baseline, jar: jar, rule: rule, storeLost: storeLost)
        storeLost = false
        jar = work.jar
        return work
    }

    /// The store holds what `work` made it hold (not the jar, which may have heard more since).
    mutating func settled(_ work: CookieReconciliation) {
        baseline = work.jar
    }
}
