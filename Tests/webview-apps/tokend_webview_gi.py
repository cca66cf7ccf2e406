#!/usr/bin/python3
"""A PyGObject application whose web view is attached to tokend through the
TokendWebView typelib, on GTK 4 with WebKitGTK 6.0 (--gtk 4) or on GTK 3 with
WebKitGTK 4.1 (--gtk 3). The web view suite (Tests/integration/test_webview.py)
runs against it as against tokend-webview: the same command line,
    tokend_webview_gi.py --gtk 4|3 [--session NAME] [--socket PATH] URL
and it ends cleanly on SIGTERM."""
import argparse
import signal
import sys

import gi


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gtk", choices=["3", "4"], default="4")
    parser.add_argument("--session", default="default")
    parser.add_argument("--socket")
    parser.add_argument("url")
    args = parser.parse_args()

    gi.require_version("TokendWebView", "1")
    gi.require_version("Gtk", f"{args.gtk}.0")
    gi.require_version(*{"4": ("WebKit", "6.0"), "3": ("WebKit2", "4.1")}[args.gtk])
    from gi.repository import GLib, Gtk, TokendWebView

    opened = Gtk.init_check() if args.gtk == "4" else Gtk.init_check(sys.argv)[0]
    if not opened:
        print("tokend_webview_gi: cannot open a display", file=sys.stderr)
        return 69
    if args.gtk == "4":
        from gi.repository import WebKit
        view = WebKit.WebView(network_session=WebKit.NetworkSession.new_ephemeral())
    else:
        from gi.repository import WebKit2
        view = WebKit2.WebView(web_context=WebKit2.WebContext.new_ephemeral())
    tokend = TokendWebView.attach_to_socket(view, args.session, args.socket)
    tokend.connect("logged-out", lambda _, reason: print(f"tokend_webview_gi: signal logged-out ({reason})", file=sys.stderr))
    tokend.connect("cookies-restored", lambda _, count: print(f"tokend_webview_gi: signal cookies-restored ({count} cookies)",
                                                               file=sys.stderr))

    loop = GLib.MainLoop()
    window = Gtk.Window(title="tokend_webview_gi")
    window.set_default_size(1024, 768)
    view.connect("notify::title", lambda view, _: window.set_title(view.get_title() or ""))
    if args.gtk == "4":
        window.set_child(view)
        window.connect("close-request", lambda _: loop.quit())
    else:
        window.add(view)
        window.connect("delete-event", lambda *_: loop.quit())
    for number in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, number, lambda: loop.quit() or True)
    view.load_uri(args.url)
    if args.gtk == "4":
        window.present()
    else:
        window.show_all()
    loop.run()
    tokend.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
