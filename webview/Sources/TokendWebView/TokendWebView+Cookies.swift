import TokendInterface
import Varlink

/// The web view's cookies kept in line with tokend's jar, both ways. One
/// operation at a time: tokend's events, navigations and the store's own
/// changes all meet in the queue, where a reconcile first takes what the site
/// changed (store against baseline) to tokend, then makes the store match the jar.
extension TokendWebView {
    func enqueue(_ operation: @escaping @MainActor (@escaping @MainActor () -> Void) -> Void) {
        operations.append(operation)
        runNext()
    }

    private func runNext() {
        guard !operating, !operations.isEmpty, keepAlive != nil else { return }
        operating = true
        let operation = operations.removeFirst()
        operation { [weak self] in
            self?.operating = false
            self?.runNext()
        }
    }

    /// Changes the jar as tokend's event says, then makes the store match: in the queue,
    /// so the jar never moves under a reconcile that is halfway through.
    func update(_ change: @escaping @MainActor (inout [CookieKey: Cookie]) -> Void) {
        enqueue { [weak self] done in
            guard let self else { return done() }
            change(&self.cookies.jar)
            self.readStore { store in self.settle(store, done) }
        }
    }

    /// Queues one reconcile (one waiting is enough: it reads the store when it runs).
    func reconcile(then: (@MainActor () -> Void)? = nil) {
        if !reconcileQueued {
            reconcileQueued = true
            enqueue { [weak self] done in
                guard let self else { return done() }
                self.reconcileQueued = false
                self.readStore { store in self.settle(store, done) }
            }
        }
        if let then {
            enqueue { done in
                then()
                done()
            }
        }
    }

    /// The store's cookies for the web hosts.
    private func readStore(_ body: @escaping @MainActor ([CookieKey: Cookie]) -> Void) {
        let (callback, data) = whenReady { [weak self] result in
            guard let self else { return }
            var error: UnsafeMutablePointer<GError>?
            let list = webkit_cookie_manager_get_all_cookies_finish(self.cookieManager, result.result, &error)
            if let why = take(error) { self.log("reading the web view's cookies failed: \(why)") }
            var store: [CookieKey: Cookie] = [:]
            var node = list
            while let item = node {
                if let soup = item.pointee.data {
                    let cookie = Cookie(soup: OpaquePointer(soup))
                    if self.hosts.mirrors(cookie) { store[cookie.key] = cookie }
                    soup_cookie_free(OpaquePointer(soup))
                }
                node = item.pointee.next
            }
            g_list_free(list)
            guard self.keepAlive != nil else { return }  // detached: the store is no longer ours to change
            body(store)
        }
        webkit_cookie_manager_get_all_cookies(cookieManager, nil, callback, data)
    }

    /// What changed in the store since we last looked, and was not our doing,
    /// is the site's (its Set-Cookie or a script): it goes to tokend's jar, if
    /// the import rule lets it. Then the store is made to hold exactly the
    /// jar's cookies for the web hosts.
    private func settle(_ store: [CookieKey: Cookie], _ done: @escaping @MainActor () -> Void) {
        let lost = cookies.baseline.count
        let work = cookies.reconcile(store: store, rule: hosts.rule)
        if work.storeWasEmptied { log("the web view's cookie store was emptied (\(lost) cookies); restoring tokend's") }
        for cookie in work.refused {
            log("refused the site's cookie \(cookie.name) for \(cookie.domain): not the host of one of session \(session)'s web-origins")
        }
        for (url, setCookie) in work.imports { importCookies(url: url, setCookie: setCookie) }
        let settled: @MainActor () -> Void = { [weak self] in
            guard let self else { return done() }
            self.cookies.settled(work)
            if work.storeWasEmptied { self.notify(.cookiesRestored(count: work.additions.count)) }
            done()
        }
        var left = work.removals.count + work.additions.count
        guard left > 0 else { return settled() }
        let finished: @MainActor () -> Void = {
            left -= 1
            if left == 0 { settled() }
        }
        for cookie in work.removals { change(cookie, add: false, finished) }
        for cookie in work.additions { change(cookie, add: true, finished) }
    }

    private func importCookies(url: String, setCookie: [String]) {
        let parameters: JSONObject = [
            "session": .string(session), "url": .string(url), "setCookie": .array(setCookie.map { .string($0) }),
        ]
        call("ImportCookies", parameters) { [weak self] result in
            switch result {
            case .success(let reply) where reply.error != nil:
                self?.log("tokend did not take the site's cookies for \(url): \(VarlinkError(reply.error!, reply.parameters))")
            case .failure(let failure):
                self?.log("the site's cookies for \(url) did not reach tokend: \(failure)")
            case .success(let reply):
                for reason in reply.parameters["rejected"]?.arrayValue ?? [] {
                    self?.log("tokend rejected a cookie the site set: \(reason.stringValue ?? "")")
                }
            }
        }
    }

    private func change(_ cookie: Cookie, add: Bool, _ finished: @escaping @MainActor () -> Void) {
        let soup = cookie.soupCookie()
        let (callback, data) = whenReady { [weak self] result in
            guard let self else { return finished() }
            var error: UnsafeMutablePointer<GError>?
            if add {
                webkit_cookie_manager_add_cookie_finish(self.cookieManager, result.result, &error)
            } else {
                webkit_cookie_manager_delete_cookie_finish(self.cookieManager, result.result, &error)
            }
            if let why = take(error) { self.log("\(add ? "adding" : "deleting") cookie \(cookie.name) failed: \(why)") }
            finished()
        }
        if add {
            webkit_cookie_manager_add_cookie(cookieManager, soup, nil, callback, data)
        } else {
            webkit_cookie_manager_delete_cookie(cookieManager, soup, nil, callback, data)
        }
        soup_cookie_free(soup)
    }

    /// The store's `changed` signal says nothing of what changed (and fires for
    /// our own changes too): a reconcile finds out.
    func watchCookies() {
        let changed: @convention(c) (UnsafeMutableRawPointer?, gpointer?) -> Void = { _, data in
            MainActor.assumeIsolated {
                let attachment = Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue()
                if attachment.ready { attachment.reconcile() }
            }
        }
        listen(raw(cookieManager)!, "changed", changed, Unmanaged.passUnretained(self).toOpaque())
    }
}
