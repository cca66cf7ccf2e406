import CWebKitGTK
import Foundation
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
///     tokend.detach()                                      // or destroy the web view
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
    /// Where the attachment says what it does (default: standard error).
    public var log: @MainActor (String) -> Void = { line in
        FileHandle.standardError.write(Data("tokend-webview: \(line)\n".utf8))
    }

    let webView: UnsafeMutablePointer<WebKitWebView>
    let contentManager: OpaquePointer
    let cookieManager: OpaquePointer
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
    var networkProcessWatch: (fd: Int32, source: guint)?
    /// Navigations waiting for tokend's first answer.
    var heldNavigations: [UnsafeMutablePointer<WebKitPolicyDecision>] = []
    /// Navigations waiting in the queue for their reconcile.
    var waitingNavigations: [UInt: UnsafeMutablePointer<WebKitPolicyDecision>] = [:]

    init(webView: UnsafeMutablePointer<WebKitWebView>, session: String, socket: String) {
        self.webView = webView
        self.session = session
        self.socket = socket
        contentManager = webkit_web_view_get_user_content_manager(webView)
        cookieManager = webkit_network_session_get_cookie_manager(webkit_web_view_get_network_session(webView))
    }

    /// A web view for `attach`: its own ephemeral network session, so the only
    /// cookies in it are the ones tokend and the site put there.
    public static func makeWebView() -> UnsafeMutablePointer<WebKitWebView> {
        let network = webkit_network_session_new_ephemeral()
        defer { g_object_unref(raw(network)) }
        var value = GValue()
        g_value_init(&value, webkit_network_session_get_type())
        g_value_set_object(&value, raw(network))
        defer { g_value_unset(&value) }
        let name = strdup("network-session")
        defer { free(name) }
        var names: [UnsafePointer<CChar>?] = [UnsafePointer(name)]
        let object = names.withUnsafeMutableBufferPointer {
            g_object_new_with_properties(webkit_web_view_get_type(), 1, $0.baseAddress, &value)
        }
        let view: UnsafeMutablePointer<WebKitWebView> = cast(raw(object))!
        g_object_ref_sink(raw(view))  // the caller owns it, whether or not a container takes it
        return view
    }

    /// Attaches tokend's session to `webView` (a `WebKitWebView *` with an
    /// ephemeral network session) until `detach()` or the web view's end.
    /// `socket`: tokend's socket (default: $TOKEND_SOCKET, else the system socket).
    public static func attach(
        to webView: UnsafeMutablePointer<WebKitWebView>, session: String = "default", socket: String? = nil
    ) throws(AttachError) -> TokendWebView {
        guard webkit_network_session_is_ephemeral(webkit_web_view_get_network_session(webView)) != 0 else {
            throw AttachError.persistentStore
        }
        let attachment = TokendWebView(webView: webView, session: session, socket: BrokerInterface.socketPath(socket))
        attachment.keepAlive = attachment
        attachment.start()
        return attachment
    }

    func start() {
        g_object_ref(raw(webView))
        watchPages()
        watchNavigations()
        watchCookies()
        let this = Unmanaged.passUnretained(self).toOpaque()
        let destroyed: @convention(c) (UnsafeMutableRawPointer?, gpointer?) -> Void = { _, data in
            MainActor.assumeIsolated { Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue().detach() }
        }
        listen(raw(webView)!, "destroy", destroyed, this)
        connectToTokend()
        after(milliseconds: Self.navigationWait) { [weak self] in self?.releaseHeldNavigations(why: "tokend has not answered") }
    }

    func listen<Handler>(_ instance: UnsafeMutableRawPointer, _ signal: String, _ handler: Handler, _ data: UnsafeMutableRawPointer) {
        signals.append((instance, connectSignal(instance, signal, handler, data)))
    }

    /// Stops relaying and mirroring; the web view keeps the cookies it has.
    public func detach() {
        guard keepAlive != nil else { return }
        withExtendedLifetime(self) {
            keepAlive = nil  // first: the streams' ends below are not outages to recover from
            for (instance, id) in signals { g_signal_handler_disconnect(instance, id) }
            signals.removeAll()
            removeRelay()
            webkit_user_content_manager_unregister_script_message_handler(contentManager, "tokend", Self.world)
            releaseHeldNavigations(why: "detached")
            for key in Array(waitingNavigations.keys) { proceed(key) }
            stopWatchingNetworkProcess()
            stream?.close()
            calls?.close()
            g_object_unref(raw(webView))
            log("detached from session \(session)")
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
        "the web view's network session keeps cookies on disk; tokend keeps the session's cookies, so give the web view "
        + "an ephemeral one (webkit_network_session_new_ephemeral(), or TokendWebView.makeWebView())")
}
