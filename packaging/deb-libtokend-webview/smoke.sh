#!/bin/bash
# The three packages as installed: unpacked into a scratch root, a C program
# builds against libtokend-webview-dev with pkg-config, and PyGObject attaches
# a web view through the packaged typelib on GTK 4 (WebKitGTK 6.0) and GTK 3
# (WebKitGTK 4.1), loading the packaged backends (no Swift on the library path).
#   packaging/deb-libtokend-webview/smoke.sh DEBDIR
set -euo pipefail
debs=${1:?usage: smoke.sh DEBDIR}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for deb in "$debs"/libtokend-webview1_*.deb "$debs"/libtokend-webview-dev_*.deb "$debs"/gir1.2-tokendwebview-1_*.deb; do
    dpkg-deb -x "$deb" "$root"
done
libdir=$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)

cat > "$root/attach.c" <<'C'
#include <tokend-webview.h>
int main (void) { return tokend_web_view_attach (g_object_new (G_TYPE_OBJECT, NULL), "default", NULL) != NULL; }
C
sed -i "s|^prefix=/usr$|prefix=$root/usr|" "$libdir/pkgconfig/tokend-webview-1.pc"  # installed under $root
cc -o "$root/attach" "$root/attach.c" $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs tokend-webview-1)
LD_LIBRARY_PATH=$libdir "$root/attach"  # refused: a GObject is no web view
echo "C: built with pkg-config tokend-webview-1 and run"

for gtk in 4 3; do
    GI_TYPELIB_PATH=$libdir/girepository-1.0 LD_LIBRARY_PATH=$libdir NO_AT_BRIDGE=1 TOKEND_SOCKET=/nonexistent \
        xvfb-run -a /usr/bin/python3 - "$gtk" 2>/dev/null <<'PY'
import sys
import gi
gtk = sys.argv[1]
gi.require_version("TokendWebView", "1")
gi.require_version("Gtk", f"{gtk}.0")
gi.require_version(*{"4": ("WebKit", "6.0"), "3": ("WebKit2", "4.1")}[gtk])
from gi.repository import Gtk, TokendWebView
if gtk == "4":
    from gi.repository import WebKit
    Gtk.init()
    view = WebKit.WebView(network_session=WebKit.NetworkSession.new_ephemeral())
else:
    from gi.repository import WebKit2
    Gtk.init(sys.argv)
    view = WebKit2.WebView(web_context=WebKit2.WebContext.new_ephemeral())
tokend = TokendWebView.attach(view, "portal")
assert tokend.props.webkit_api == {"4": "6.0", "3": "4.1"}[gtk] and tokend.is_attached()
tokend.detach()
print(f"Python, GTK {gtk}: attached on WebKitGTK {tokend.props.webkit_api} through the packaged typelib, detached")
PY
done
