import ArgumentParser
import CWebKitGTK
import Foundation
import TokendWebView

/// tokend-webview: a web app in a window, its session owned by tokend.
@main
struct TokendWebViewCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokend-webview",
        abstract: "Open a web app in a window whose web view gets its token and cookies from tokend.",
        discussion: """
            The page asks for tokens with web/tokend-page.js, as in a browser with the tokend extension; \
            only pages on the session's web-origins get answers. tokend's cookies are written into the \
            web view's private store before every navigation to those origins, and the site's cookies \
            go back to tokend. Closing the window ends the program.
            """)

    @Option(help: "The tokend session to use.")
    var session = "default"

    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else /run/tokend/io.tokend.Broker).")
    var socket: String?

    @Flag(help: "Fill the screen (kiosks).")
    var fullscreen = false

    @Argument(help: "The web app's URL.")
    var url: String

    func validate() throws {
        guard let parts = URLComponents(string: url), ["http", "https"].contains(parts.scheme), parts.host != nil else {
            throw ValidationError("'\(url)' is not an http or https URL, e.g. https://app.example.com/")
        }
    }

    func run() throws {
        try MainActor.assumeIsolated { try open() }
    }

    @MainActor
    func open() throws {
        guard gtk_init_check() != 0 else {
            FileHandle.standardError.write(Data(
                "tokend-webview: cannot open a display: set DISPLAY or WAYLAND_DISPLAY (headless: xvfb-run -a tokend-webview URL)\n".utf8))
            throw ExitCode(69)  // EX_UNAVAILABLE
        }
        let webView = TokendWebView.makeWebView()
        let tokend = try TokendWebView.attach(to: webView, session: session, socket: socket)
        let window = Window(webView: webView, fullscreen: fullscreen)
        webkit_web_view_load_uri(webView, url)
        window.run()
        tokend.detach()
    }
}

/// The window: the web view, titled by its page, and a main loop that ends when it closes.
@MainActor
final class Window {
    let window: UnsafeMutablePointer<GtkWidget>
    let loop = g_main_loop_new(nil, 0)

    init(webView: UnsafeMutablePointer<WebKitWebView>, fullscreen: Bool) {
        window = gtk_window_new()
        let gtkWindow = UnsafeMutableRawPointer(window).assumingMemoryBound(to: GtkWindow.self)
        gtk_window_set_title(gtkWindow, "tokend-webview")
        gtk_window_set_default_size(gtkWindow, 1024, 768)
        gtk_window_set_child(gtkWindow, UnsafeMutableRawPointer(webView).assumingMemoryBound(to: GtkWidget.self))
        if fullscreen { gtk_window_fullscreen(gtkWindow) }
        let this = Unmanaged.passUnretained(self).toOpaque()
        let title: @convention(c) (UnsafeMutableRawPointer?, gpointer?, gpointer?) -> Void = { view, _, data in
            MainActor.assumeIsolated {
                let window = Unmanaged<Window>.fromOpaque(data!).takeUnretainedValue()
                let text = webkit_web_view_get_title(view?.assumingMemoryBound(to: WebKitWebView.self))
                gtk_window_set_title(UnsafeMutableRawPointer(window.window).assumingMemoryBound(to: GtkWindow.self), text)
            }
        }
        g_signal_connect_data(UnsafeMutableRawPointer(webView), "notify::title", unsafeBitCast(title, to: GCallback.self), this, nil, GConnectFlags(rawValue: 0))
        let closed: @convention(c) (UnsafeMutableRawPointer?, gpointer?) -> gboolean = { _, data in
            MainActor.assumeIsolated { g_main_loop_quit(Unmanaged<Window>.fromOpaque(data!).takeUnretainedValue().loop) }
            return 0
        }
        g_signal_connect_data(UnsafeMutableRawPointer(window), "close-request", unsafeBitCast(closed, to: GCallback.self), this, nil, GConnectFlags(rawValue: 0))
        let quit: @convention(c) (gpointer?) -> gboolean = { data in
            MainActor.assumeIsolated { g_main_loop_quit(Unmanaged<Window>.fromOpaque(data!).takeUnretainedValue().loop) }
            return 1
        }
        g_unix_signal_add(SIGTERM, quit, this)
        g_unix_signal_add(SIGINT, quit, this)
        gtk_window_present(gtkWindow)
    }

    func run() {
        g_main_loop_run(loop)
    }
}
