#!/usr/bin/python3
"""A PyGObject application whose web view is attached to tokend through the
TokendWebView typelib, on GTK 4 with WebKitGTK 6.0 (--gtk 4) or on GTK 3 with
WebKitGTK 4.1 (--gtk 3). The web view suite (Tests/integration/test_webview.py)
runs against it as against tokend-webview: the same command line,
    tokend_webview_gi.py --gtk 4|3 [--session NAME] [--socket PATH] URL
and it ends cleanly on SIGTERM. On SIGUSR1 it destroys its window without
detaching and lets go of the attachment, and says when the web view and the
attachment are finalized (test_webview_gi.py: detach on destroy)."""
import argparse
import gc
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

    def say(text):
        print(f"tokend_webview_gi: {text}", file=sys.stderr, flush=True)

    opened = Gtk.init_check() if args.gtk == "4" else Gtk.init_check(sys.argv)[0]
    if not opened:
        say("cannot open a display")
        return 69
    if args.gtk == "4":
        from gi.repository import WebKit
        view = WebKit.WebView(network_session=WebKit.NetworkSession.new_ephemeral())
    else:
        from gi.repository import WebKit2
        view = WebKit2.WebView(web_context=WebKit2.WebContext.new_ephemeral())
    tokend = TokendWebView.attach_to_socket(view, args.session, args.socket)
    tokend.connect("logged-out", lambda _, reason: say(f"signal logged-out ({reason})"))
    tokend.connect("cookies-restored", lambda _, count: say(f"signal cookies-restored ({count} cookies)"))
    tokend.connect("detached", lambda attachment: say(f"signal detached (attached: {int(attachment.is_attached())})"))
    view.weak_ref(say, "web view finalized")
    tokend.weak_ref(say, "attachment finalized")

    loop = GLib.MainLoop()
    window = Gtk.Window(title="tokend_webview_gi")
    window.set_default_size(1024, 768)
    # The title from the view's own window: a closure holding the window would keep it (and the view) alive.
    toplevel = (lambda view: view.get_root()) if args.gtk == "4" else (lambda view: view.get_toplevel())
    view.connect("notify::title", lambda view, _: toplevel(view).set_title(view.get_title() or ""))
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

    def destroy_window():
        """The window goes, and the web view with it; the attachment is not detached (the web view's end does it)."""
        nonlocal window, view, tokend
        if window:
            say("destroying the window without detaching")
            window.destroy()
            window = view = tokend = None
            gc.collect()
        return True
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGUSR1, destroy_window)
    loop.run()
    if tokend:
        tokend.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
