# Over 90 s of `make test` (docs/testing.md): web views of the C, PyGObject (GTK 4 and 3) and GJS apps on
# Xvfb, on both WebKitGTK APIs (115 s summed on the busy 2-core machine).
"""libtokend-webview-1 itself, beyond the web view suite (test_webview.py runs
that against the library's C, PyGObject and GJS apps): its refusals and detach
through the typelib on both WebKitGTK APIs, detach on the web view's end (a
window destroyed without detach), the backends found from a library loaded by a
relative name, its signals in the apps, and its build: no WebKitGTK of its own,
each backend with its API's WebKitGTK and the Swift runtime inside, exporting
its entry points only, on FoundationEssentials and under 16 MiB stripped."""
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import WEBVIEW, wait_for
from test_webview import App
from webview import ALL_APPS, SYSTEM_PYTHON, WEBVIEW_C, Display

LIBRARY_APPS = [name for name in ALL_APPS if name != "swift"]
LIB = os.path.join(WEBVIEW_C, "lib")
BACKENDS = {"6.0": ("libtokend-webview-6.so", "libwebkitgtk-6.0.so.4"),
            "4.1": ("libtokend-webview-4.1.so", "libwebkit2gtk-4.1.so.0")}

# Attaches through the typelib as an app would, and reports what each call did.
PROBE = r"""
import gc, json, sys
import gi
gtk = sys.argv[1]
gi.require_version("TokendWebView", "1")
gi.require_version("Gtk", f"{gtk}.0")
gi.require_version(*{"4": ("WebKit", "6.0"), "3": ("WebKit2", "4.1")}[gtk])
from gi.repository import GLib, GObject, Gtk, TokendWebView
assert Gtk.init_check() if gtk == "4" else Gtk.init_check(sys.argv)[0]
if gtk == "4":
    from gi.repository import WebKit
    persistent, view = WebKit.WebView(), WebKit.WebView(network_session=WebKit.NetworkSession.new_ephemeral())
else:
    from gi.repository import WebKit2
    persistent, view = WebKit2.WebView(), WebKit2.WebView(is_ephemeral=True)

def refusal(call):
    try:
        call()
    except GLib.Error as error:
        return [error.domain, error.code, error.message]

results = {
    "not a web view": refusal(lambda: TokendWebView.attach(GObject.Object(), "default")),
    "persistent": refusal(lambda: TokendWebView.attach(persistent, "default")),
}
tokend = TokendWebView.attach_to_socket(view, "default", "/nonexistent/io.tokend.Broker")
disconnected = []
tokend.connect("disconnected", lambda _, reason: disconnected.append(reason))
context, deadline = GLib.MainContext.default(), GLib.get_monotonic_time() + 10_000_000
while not disconnected and GLib.get_monotonic_time() < deadline:
    context.iteration(True)
results["disconnected"] = disconnected
results["api"] = tokend.props.webkit_api
results["twice"] = refusal(lambda: TokendWebView.attach(view, "default"))
detached = []
tokend.connect("detached", lambda _: detached.append(tokend.is_attached()))
tokend.detach()
tokend.detach()
results["detached"] = detached
again = TokendWebView.attach_to_socket(view, "other", "/nonexistent/io.tokend.Broker")
results["again"] = again.get_session()
# The web view's end detaches it: GTK 3's gtk_widget_destroy; on GTK 4 its last reference going
# (the attachment holds none). Either way the attachment says so at once, and its signal follows.
detached.clear()
again.connect("detached", lambda _: detached.append(again.is_attached()))
gone = []
view.weak_ref(gone.append, "finalized")
if gtk == "3":
    view.destroy()
del view
gc.collect()
results["destroyed"] = [again.is_attached(), gone]
while not detached and GLib.get_monotonic_time() < deadline + 10_000_000:
    context.iteration(True)
results["destroyed"].append(detached)
results["after"] = [again.get_session(), again.props.webkit_api, again.detach()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def display():
    instance = Display()
    yield instance
    instance.stop()


@WEBVIEW
@pytest.mark.parametrize("gtk,api", [("4", "6.0"), ("3", "4.1")])
def test_refusals_name_their_reason_and_a_detached_view_can_be_attached_again(display, gtk, api):
    env = dict(os.environ, DISPLAY=display.name, NO_AT_BRIDGE="1", GI_TYPELIB_PATH=os.path.join(LIB, "girepository-1.0"),
               LD_LIBRARY_PATH=LIB)
    done = subprocess.run([SYSTEM_PYTHON, "-c", PROBE, gtk], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    domain = "tokend-web-view-error-quark"
    assert results["not a web view"] == [domain, 0, "a GObject is not a WebKitWebView"]
    assert results["persistent"][:2] == [domain, 3] and "ephemeral" in results["persistent"][2]
    assert results["disconnected"] == ["tokend is unreachable: /nonexistent/io.tokend.Broker: No such file or directory"]
    assert results["api"] == api
    assert results["twice"][:2] == [domain, 4]
    assert results["detached"] == [False]  # once, though detached twice; no longer attached when it fires
    assert results["again"] == "other"
    assert results["destroyed"] == [False, ["finalized"], [False]]  # detached, the view freed, then the signal
    assert results["after"] == ["other", api, None]  # what an app may still ask of a detached attachment
    assert "tokend is not available" in done.stderr  # the library's log, through GLib's


# The library loaded by a relative name (LD_LIBRARY_PATH=lib, from libtokend-webview-1's tree), and the
# working directory changed before the first attach, which loads the backend.
RELATIVE = r"""
import ctypes, json, os, sys
import gi
gi.require_version("TokendWebView", "1")
gi.require_version("Gtk", "4.0")
gi.require_version("WebKit", "6.0")
from gi.repository import Gtk, TokendWebView, WebKit
TokendWebView.Attachment.__gtype__  # loads the library

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
library = ctypes.CDLL("libtokend-webview.so.1", mode=os.RTLD_NOLOAD)
info = DlInfo()
assert ctypes.CDLL(None).dladdr(ctypes.cast(library.tokend_web_view_attach, ctypes.c_void_p), ctypes.byref(info))
os.chdir(sys.argv[1])
assert Gtk.init_check()
view = WebKit.WebView(network_session=WebKit.NetworkSession.new_ephemeral())
tokend = TokendWebView.attach_to_socket(view, "default", "/nonexistent/io.tokend.Broker")
print(json.dumps([info.fname.decode(), tokend.is_attached(), tokend.props.webkit_api]))
tokend.detach()
"""


@WEBVIEW
def test_the_backends_are_found_where_the_library_was_loaded_from_whatever_the_directory_later(display, tmp_path):
    env = dict(os.environ, DISPLAY=display.name, NO_AT_BRIDGE="1", GI_TYPELIB_PATH=os.path.join(LIB, "girepository-1.0"),
               LD_LIBRARY_PATH="lib")
    done = subprocess.run([SYSTEM_PYTHON, "-c", RELATIVE, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env=env, cwd=WEBVIEW_C)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["lib/libtokend-webview.so.1", True, "6.0"]


@pytest.fixture(params=LIBRARY_APPS)
def app(request, display, server, make_tokend, workdir):
    instance = App(display, server, make_tokend, workdir, kind=request.param)
    yield instance
    instance.close()


@WEBVIEW
def test_the_app_hears_cookies_restored_and_logged_out(app):
    cookies = app.tokend_cookies()
    app.sent_cookies()  # a page has loaded: the network process is watched
    network = app.view.children("WebKitNetworkProcess")
    assert len(network) == 1, network
    os.kill(network[0], signal.SIGKILL)
    app.navigate("/remote?after-kill")
    restored = logged(app, r"signal cookies-restored \((\d+) cookies\)")
    assert int(restored.group(1)) >= len(cookies) > 0  # the jar's cookies for the app's host, csrf's /o/token too
    assert app.sent_cookies() == cookies
    assert app.daemon.ctl("logout").returncode == 0
    logged(app, r"signal logged-out \(loggedOut\)")


def logged(app, pattern):
    """Waits for a line matching `pattern` in the app's log; a timeout shows the log."""
    try:
        return wait_for(lambda: re.search(pattern, app.view.logs()), 20, pattern)
    except AssertionError:
        raise AssertionError(f"no {pattern!r} in the app's log:\n{app.view.logs()}") from None


def dynamic(path, defined):
    """The names in a shared library's dynamic symbol table: those it defines (global), or needs."""
    flag = "--defined-only" if defined else "--undefined-only"
    lines = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True, check=True).stdout.splitlines()
    # Global definitions (code and data: not the symbol version's own name), without their version.
    return {line.split()[-1].split("@")[0] for line in lines if not defined or line.split()[-2] in "TDBR"}


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", out))


def test_the_library_has_no_webkit_and_each_backend_its_own_with_the_swift_runtime_inside():
    library = os.path.join(LIB, "libtokend-webview.so.1")
    assert not [name for name in needed(library) if "webkit" in name or "gtk" in name]
    assert all(name.startswith("tokend_web_view_") for name in dynamic(library, defined=True))
    for api, (file, webkit) in BACKENDS.items():
        backend = os.path.join(LIB, "tokend-webview-1", file)
        libraries = needed(backend)
        other = next(w for a, (_, w) in BACKENDS.items() if a != api)
        assert webkit in libraries and other not in libraries, libraries
        assert not [name for name in libraries if "swift" in name.lower() or "Foundation" in name or "dispatch" in name]
        assert dynamic(backend, defined=True) == {
            "tokend_webview_backend_attach", "tokend_webview_backend_detach", "tokend_webview_backend_release"}
        assert not [name for name in dynamic(backend, defined=False) if name.startswith("$s")]


# Foundation's, FoundationInternationalization's and ICU's symbols (ICU's data is icudtNN_dat).
NOT_IN_A_CORE = re.compile(r" (icudt\d+_dat|\$s10Foundation|\$s31FoundationInternationalization|\$s13_FoundationICU)")


def test_each_core_is_on_foundation_essentials_and_under_16_mib_stripped(tmp_path):
    for api, (file, _) in BACKENDS.items():
        backend = os.path.join(LIB, "tokend-webview-1", file)
        symbols = subprocess.run(["nm", backend], capture_output=True, text=True, check=True).stdout
        assert "$s20FoundationEssentials" in symbols  # the check below looks at a build with symbols
        assert not NOT_IN_A_CORE.findall(symbols)[:5]
        stripped = tmp_path / file
        subprocess.run(["strip", "--strip-unneeded", "--remove-section=.comment", "--remove-section=.note",
                        "-o", stripped, backend], check=True)
        print(f"\n{file} (WebKitGTK {api}): {stripped.stat().st_size:,} bytes stripped")
        assert stripped.stat().st_size <= 16 << 20


def subscribers(daemon):
    """tokend's tokend_subscribers gauge: Subscribe calls open."""
    text = daemon.call("io.tokend.Broker.GetMetrics")[1]["parameters"]["text"]
    return int(float(re.search(r"^tokend_subscribers (\S+)$", text, re.M).group(1)))


@WEBVIEW
def test_destroying_the_window_without_detach_frees_view_and_attachment_and_ends_the_subscription(app):
    """The app (SIGUSR1) destroys its window and drops its reference to the attachment, detaching
    nothing: the web view's end detaches it on GTK 4 as on GTK 3, nothing keeps the two alive (the
    apps' weak references say when each is finalized; GJS has none to give) and the core closes its
    connections to tokend."""
    app.sent_cookies()  # attached, subscribed, the page running
    assert subscribers(app.daemon) == 1
    os.kill(app.view.process.pid, signal.SIGUSR1)
    logged(app, "destroying the window without detaching")
    logged(app, r"signal detached \(attached: 0\)")
    if app.kind != "gjs":
        logged(app, "web view finalized")
        logged(app, "attachment finalized")
    wait_for(lambda: subscribers(app.daemon) == 0, 20, "tokend's subscription closed")
    assert app.view.alive()
    lines = app.view.logs()
    after = lines[lines.index("destroying the window without detaching"):]
    assert "detached from session default" in after
    assert "tokend is not available" not in after  # its streams' end is no outage to recover from
