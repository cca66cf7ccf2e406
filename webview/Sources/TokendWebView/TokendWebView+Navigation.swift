import FoundationEssentials
import Glibc

/// Cookies before navigation: a navigation to a web origin's host waits for
/// its policy decision until the store matches tokend's jar. A crashed web
/// process reloads its page; an ended network process (whose store held the
/// cookies) is noticed and the cookies are put back.
extension TokendWebView {
    func watchNavigations() {
        let this = Unmanaged.passUnretained(self).toOpaque()
        let decide: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<WebKitPolicyDecision>?, WebKitPolicyDecisionType, gpointer?)
            -> gboolean = { _, decision, type, data in
                guard type == WEBKIT_POLICY_DECISION_TYPE_NAVIGATION_ACTION, let decision else { return 0 }
                return MainActor.assumeIsolated {
                    Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().navigation(decision) ? 1 : 0
                }
            }
        listen(raw(webView)!, "decide-policy", decide, this)
        let terminated: @convention(c) (UnsafeMutableRawPointer?, WebKitWebProcessTerminationReason, gpointer?) -> Void = { _, reason, data in
            MainActor.assumeIsolated {
                Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().webProcessEnded(reason)
            }
        }
        listen(raw(webView)!, "web-process-terminated", terminated, this)
        let loadChanged: @convention(c) (UnsafeMutableRawPointer?, WebKitLoadEvent, gpointer?) -> Void = { _, event, data in
            guard event == WEBKIT_LOAD_COMMITTED else { return }
            MainActor.assumeIsolated {
                Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().watchNetworkProcesses()
            }
        }
        listen(raw(webView)!, "load-changed", loadChanged, this)
    }

    /// Returns whether the decision is held (and will be used once the cookies are in).
    func navigation(_ decision: UnsafeMutablePointer<WebKitPolicyDecision>) -> Bool {
        let action = webkit_navigation_policy_decision_get_navigation_action(NavigationDecision(UnsafeMutableRawPointer(decision)))
        guard let uri = webkit_uri_request_get_uri(webkit_navigation_action_get_request(action)) else { return false }
        let url = String(cString: uri)
        g_object_ref(raw(decision))
        if !ready {
            heldNavigations.append(decision)
            return true
        }
        guard hosts.contains(url: url) else {
            g_object_unref(raw(decision))
            return false
        }
        let key = UInt(bitPattern: decision)
        waitingNavigations[key] = decision
        reconcile { [weak self] in self?.proceed(key) }
        return true
    }

    /// A navigation waiting in the queue goes on (once: detaching lets every one go).
    func proceed(_ key: UInt) {
        guard let decision = waitingNavigations.removeValue(forKey: key) else { return }
        webkit_policy_decision_use(decision)
        g_object_unref(raw(decision))
    }

    /// Lets navigations held for tokend's first answer go on (through a reconcile once tokend answered).
    func releaseHeldNavigations(why: String?) {
        if why != nil, !ready, script == nil, keepAlive != nil { installRelay(everywhere: true) }
        guard !heldNavigations.isEmpty else { return }
        let held = heldNavigations
        heldNavigations.removeAll()
        if let why { log("loading without tokend's cookies: \(why)") }
        let keys = held.map { decision in
            let key = UInt(bitPattern: decision)
            waitingNavigations[key] = decision
            return key
        }
        let go: @MainActor () -> Void = { [weak self] in for key in keys { self?.proceed(key) } }
        if why == nil { reconcile(then: go) } else { go() }
    }

    func webProcessEnded(_ reason: WebKitWebProcessTerminationReason) {
        guard reason != WEBKIT_WEB_PROCESS_TERMINATED_BY_API else { return }
        log("the web process ended (reason \(reason.rawValue)); reloading the page")
        after(milliseconds: 200) { [weak self] in
            guard let self, self.keepAlive != nil else { return }
            webkit_web_view_reload(self.webView)
        }
    }

    // MARK: WebKit's network processes

    /// Watches WebKit's network processes (this process's children) through pidfds: when one
    /// ends, the ephemeral store it held is gone. Every one is watched: nothing tells which holds
    /// the web view's store when there are several (WebKitGTK 4.1 runs one per website data
    /// manager, so a web view with an ephemeral store of its own beside the app's persistent
    /// default has two), and a store lost unnoticed would have its cookies taken for the site's
    /// deletions at the next reconcile, while one restored needlessly costs one reconcile.
    func watchNetworkProcesses() {
        for pid in Self.childProcesses(named: "WebKitNetworkProcess") where networkProcesses[pid] == nil {
            let fd = pidfd_open(pid, 0)
            guard fd >= 0 else { continue }
            let source = whenReadable(fd) { [weak self] in self?.networkProcessEnded(pid) }
            networkProcesses[pid] = (fd, source)
        }
    }

    func networkProcessEnded(_ pid: pid_t) {
        guard let watch = networkProcesses.removeValue(forKey: pid) else { return }
        close(watch.fd)  // its source ends as this returns
        log("WebKit's network process ended; its cookie store is gone")
        cookies.storeLost = true
        reconcile()
    }

    func stopWatchingNetworkProcesses() {
        for watch in networkProcesses.values {
            g_source_remove(watch.source)
            close(watch.fd)
        }
        networkProcesses.removeAll()
    }

    /// This process's children whose program is called `name` (WebKit starts its network
    /// processes directly, without a sandbox wrapper).
    static func childProcesses(named name: String) -> [pid_t] {
        let me = getpid()
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { entry in
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 2, pid_t(fields[1]) == me,
                let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")),
                String(decoding: command.prefix { $0 != 0 }, as: UTF8.self).hasSuffix(name)
            else { return nil }
            return pid
        }
    }
}
