import CWebKitGTK
import Foundation

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
                Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().watchNetworkProcess()
            }
        }
        listen(raw(webView)!, "load-changed", loadChanged, this)
    }

    /// Returns whether the decision is held (and will be used once the cookies are in).
    func navigation(_ decision: UnsafeMutablePointer<WebKitPolicyDecision>) -> Bool {
        let action = webkit_navigation_policy_decision_get_navigation_action(OpaquePointer(decision))
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

    // MARK: WebKit's network process

    /// Watches WebKit's network process (this process's child) through a pidfd:
    /// when it ends, the ephemeral store it held is gone.
    func watchNetworkProcess() {
        guard networkProcessWatch == nil, let pid = Self.childProcess(named: "WebKitNetworkProcess") else { return }
        let fd = pidfd_open(pid, 0)
        guard fd >= 0 else { return }
        let this = Unmanaged.passUnretained(self).toOpaque()
        let source = g_unix_fd_add(fd, G_IO_IN, { _, _, data in
            MainActor.assumeIsolated {
                let attachment = Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue()
                attachment.log("WebKit's network process ended; its cookie store is gone")
                if let watch = attachment.networkProcessWatch { close(watch.fd) }
                attachment.networkProcessWatch = nil  // the source ends by returning 0
                attachment.cookies.storeLost = true
                attachment.reconcile()
            }
            return 0
        }, this)
        networkProcessWatch = (fd, source)
    }

    func stopWatchingNetworkProcess() {
        guard let watch = networkProcessWatch else { return }
        g_source_remove(watch.source)
        close(watch.fd)
        networkProcessWatch = nil
    }

    /// A child of this process whose command line starts with `name` (WebKit
    /// starts its network process directly, without a sandbox wrapper).
    static func childProcess(named name: String) -> pid_t? {
        let me = getpid()
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
        for entry in entries {
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 2, pid_t(fields[1]) == me,
                let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")),
                String(decoding: command.prefix { $0 != 0 }, as: UTF8.self).hasSuffix(name)
            else { continue }
            return pid
        }
        return nil
    }
}
