import FoundationEssentials
import Glibc
import TokendInterface
import Varlink

/// tokend as the native side of a WebKitGTK web view: the page's refresh
/// script asks tokend (through a message handler with reply) instead of
/// refreshing, and tokend's cookies are written into the web view's private
/// store before every navigation to the session's web origins.
///
///     let webView = TokendWebView.makeWebView()            // an ephemeral network session
///     let tokend = try TokendWebView.attach(to: webView, session: "default")
///     webkit_web_view_load_uri(webView, "https://app.example.com/")
///     ...
///     tokend.detach()                                      // or let the web view go
///
/// The attachment holds no reference to the web view: the view's end (GTK 3's
/// `gtk_widget_destroy`, or its last reference going on GTK 4, as when its window
/// is destroyed) detaches it, from the view's `destroy` signal, which both GTKs
/// emit as the widget is disposed. Once detached, by either way, `detach()` does
/// nothing, `session` and `socket` still answer, `log` and `notify` are not called
/// again, and nothing of it reaches tokend or the web view.
///
/// Everything runs on the GLib main loop (the thread that runs GTK).
@MainActor
public final class TokendWebView {
    /// The script world the relay runs in; pages cannot reach it.
    static let world = "tokend"
    /// How long a navigation waits for tokend's cookies when tokend is slow or down.
    static let navigationWait: UInt32 = 3000
    /// How long an answer to a page waits for the cookies of its token's refresh.
    static let eventsWait: UInt32 = 3000

    public let session: String
    public let socket: String
    /// Where the attachment says what it does (default: standard error, one write a line).
    public var log: @MainActor (String) -> Void = { line in
        var text = "tokend-webview: \(line)\n"
        text.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    /// What the attachment tells the app beside its log: what an app may want to show.
    public enum Notice: Sendable, Equatable {
        /// The session ended (`loggedOut`) or needs a new login (`loginRequired`); its cookies left the web view.
        case loggedOut(reason: String)
        /// tokend went away; pages get io.tokend.Bridge.Disconnected until it is back.
        case disconnected(reason: String)
        /// tokend is back, and the web view catches up with what it missed.
        case reconnected
        /// WebKit's cookie store was lost with its network process; tokend's cookies are back in it.
        case cookiesRestored(count: Int)
        /// The attachment ended: `detach()`, or the web view's end.
        case detached
    }

    /// Called with each notice (default: nothing; the log says it all too). `.detached` is the last.
    public var notify: @MainActor (Notice) -> Void = { _ in }

    /// Not retained: the attachment ends with the web view (its `destroy` signal), and holding it
    /// would keep it from ending.
    let webView: UnsafeMutablePointer<WebKitWebView>
    let contentManager: ContentManager
    let cookieManager: CookieManager
    var signals: [(instance: UnsafeMutableRawPointer, id: gulong)] = []
    var script: OpaquePointer?
    /// Whether the relay is in every page (tokend has not named the web origins yet).
    var relayEverywhere = false
    /// Kept while attached: the signal handlers hold an unretained pointer to it.
    var keepAlive: TokendWebView?

    // tokend
    var calls: VarlinkConnection?
    var stream: VarlinkConnection?
    var reconnectDelay: UInt32 = 250
    var reconnectPending = false
    var reportedDown = false
    /// The session's web origins (from tokend), and their hosts.
    var origins: [String] = []
    /// The resources pages may ask tokens for (the session's web-resources).
    var webResources: [String] = []
    var hosts = WebHosts(origins: [])
    /// Whether tokend has told us the session's origins and cookies since attach.
    var ready = false

    // cookies
    /// tokend's cookies for the web hosts, as last heard (and as the site has changed them since),
    /// and what the store was made to hold. Changed only by operations in the queue.
    var cookies = CookieMirror()
    /// The jar's version the web view has caught up to (Subscribe's sinceVersion after a reconnect).
    var version = 0
    /// The newest generation whose events (cookies first) are in the web view.
    var applied = 0
    var waiters: [(generation: Int, resume: @MainActor () -> Void)] = []
    var operations: [@MainActor (@escaping @MainActor () -> Void) -> Void] = []
    var operating = false
    var reconcileQueued = false
    /// WebKit's network processes, watched through a pidfd each.
    var networkProcesses: [pid_t: (fd: Int32, source: guint)] = [:]
    /// Navigations waiting for tokend's first answer.
    var heldNavigations: [UnsafeMutablePointer<WebKitPolicyDecision>] = []
    /// Navigations waiting in the queue for their reconcile.
    var waitingNavigations: [UInt: UnsafeMutablePointer<WebKitPolicyDecision>] = [:]

    init(webView: UnsafeMutablePointer<WebKitWebView>, session: String, socket: String) {
        self.webView = webView
        self.session = session
        self.socket = socket
        contentManager = webkit_web_view_get_user_content_manager(webView)
        cookieManager = tokend_webkit_cookie_manager(webView)
    }

    /// A web view for `attach`: a store of its own in memory, so the only
    /// cookies in it are the ones tokend and the site put there. The caller holds
    /// a reference to it (`g_object_unref` when done): on GTK 4 its end, which
    /// detaches it, comes when that and its container's are gone.
    public static func makeWebView() -> UnsafeMutablePointer<WebKitWebView> {
        let view = tokend_webkit_new_ephemeral_web_view()!
        g_object_ref_sink(raw(view))  // the caller owns it, whether or not a container takes it
        return view
    }

    /// Attaches tokend's session to `webView` (a `WebKitWebView *` with an
    /// ephemeral network session) until `detach()` or the web view's end.
    /// `socket`: tokend's socket (default: $TOKEND_SOCKET, else the system socket).
    public static func attach(
        to webView: UnsafeMutablePointer<WebKitWebView>, session: String = "default", socket: String? = nil
    ) throws(AttachError) -> TokendWebView {
        guard tokend_webkit_is_ephemeral(webView) != 0 else {
            throw AttachError.persistentStore
        }
        let attachment = TokendWebView(webView: webView, session: session, socket: BrokerInterface.socketPath(socket))
        attachment.keepAlive = attachment
        attachment.start()
        return attachment
    }

    func start() {
        watchPages()
        watchNavigations()
        watchCookies()
        let this = Unmanaged.passUnretained(self).toOpaque()
        let destroyed: @convention(c) (UnsafeMutableRawPointer?, gpointer?) -> Void = { _, data in
            MainActor.assumeIsolated { Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().detach() }
        }
        listen(raw(webView)!, "destroy", destroyed, this)
        // From the main loop: what the first try tells (tokend down, say) reaches the `log` and
        // `notify` (the C library's signals) that the app sets once `attach` has returned.
        after(milliseconds: 0) { [weak self] in
            guard let self, self.keepAlive != nil else { return }
            self.connectToTokend()
        }
        after(milliseconds: Self.navigationWait) { [weak self] in self?.releaseHeldNavigations(why: "tokend has not answered") }
    }

    func listen<Handler>(_ instance: UnsafeMutableRawPointer, _ signal: String, _ handler: Handler, _ data: UnsafeMutableRawPointer) {
        signals.append((instance, connectSignal(instance, signal, handler, data)))
    }

    /// Stops relaying and mirroring; the web view keeps the cookies it has. Detaching again does nothing.
    public func detach() {
        guard keepAlive != nil else { return }
        withExtendedLifetime(self) {
            keepAlive = nil  // first: the streams' ends below are not outages to recover from
            for (instance, id) in signals { g_signal_handler_disconnect(instance, id) }
            signals.removeAll()
            removeRelay()
            tokend_webkit_unregister_handler(contentManager, "tokend", Self.world)
            releaseHeldNavigations(why: "detached")
            for key in Array(waitingNavigations.keys) { proceed(key) }
            stopWatchingNetworkProcesses()
            stream?.close()
            calls?.close()
            log("detached from session \(session)")
            notify(.detached)  // while the web view is still there: the app may look at it
            // The last word: what is still on its way (a cookie store's answer) reaches neither.
            log = { _ in }
            notify = { _ in }
        }
    }

    /// The origin of the page the web view shows (scheme://host[:port]).
    var currentOrigin: String? {
        guard let uri = webkit_web_view_get_uri(webView) else { return nil }
        return Self.origin(of: String(cString: uri))
    }

    nonisolated static func origin(of url: String) -> String? {
        guard let parts = URLComponents(string: url), let scheme = parts.scheme, let host = parts.host else { return nil }
        return parts.port.map { "\(scheme)://\(host):\($0)" } ?? "\(scheme)://\(host)"
    }
}

/// Why `attach` refused.
public struct AttachError: Error, CustomStringConvertible {
    public let description: String

    static let persistentStore = AttachError(description:
        "the web view's cookie store is kept on disk; tokend keeps the session's cookies, so "
        + TOKEND_WEBKIT_EPHEMERAL_HINT + " or use TokendWebView.makeWebView()")
}
