# Over 90 s of `make test` (docs/testing.md): every test starts a WebKitGTK web view (its web and network
# processes) on Xvfb, one after another in the web view group (146 s summed on the busy 2-core machine).
"""A web view app under Xvfb with tokend as its native side: the page asks
tokend through the web view's relay with the browser's page API, tokend's
cookies are in the web view before it navigates, and the site's cookies reach
tokend. Against tokend and the real authorization server (rotation, reuse
protection) and a test web app on a loopback origin.

Every test runs against each app of webview.APPS: tokend-webview (the Swift
library on WebKitGTK 6.0), and libtokend-webview-1's C program (GTK 4),
PyGObject programs on GTK 4 (WebKitGTK 6.0) and GTK 3 (WebKitGTK 4.1), and a GJS
program (GTK 4)."""
import json
import os
import signal
import threading
import time
import urllib.parse

import pytest

from conftest import WEBVIEW, issued_refresh_tokens, login, scan_for_secrets, wait_for
from resources import introspect, mode_server, password_grant
from webapp import WebApp
from webview import APPS, Display, WebView

pytestmark = WEBVIEW  # every test here runs a web view

B = "io.tokend.Broker."


@pytest.fixture(scope="module")
def display():
    instance = Display()
    yield instance
    instance.stop()


def cookie_dict(header):
    return dict(pair.split("=", 1) for pair in header.split("; ") if pair)


class App:
    """A logged-in tokend session whose web-origins is the test app, and the app in tokend-webview.
    `host`: a name for the app's loopback address (it resolves in the web view only). `resources`:
    the session's, which its login's grant carries; `session`: more of its keys."""

    def __init__(self, display, server, make_tokend, workdir, host=None, other_names=(), kind="swift",
                 resources=None, session=None):
        self.kind = kind
        self.display = display
        self.server = server
        self.app = WebApp()
        self.origin = f"http://{host}:{self.app.server.server_address[1]}" if host else self.app.origin
        keys = {"web-origins": json.dumps([self.origin]), **(session or {})}
        if resources:
            keys |= {"resources": json.dumps(resources), "scope": '"read write"'}
        self.daemon = make_tokend(server, **keys).start()
        if resources:
            status, grant = password_grant(server, resources, "read write")
            assert status == 200, grant
            assert "error" not in self.daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
            self.refresh_token = grant["refresh_token"]
        else:
            self.refresh_token = login(self.daemon, server)
        self.home = os.path.join(workdir, "home")
        names = (host, *other_names) if host else ()
        self.view = WebView(display, self.daemon.socket, self.origin + "/remote", os.path.join(workdir, "webview.log"),
                            self.home, loopback_names=names, app=kind)
        wait_for(lambda: any(path == "/ready" for path, _ in self.app.requests), 30, "the page running in the web view")

    def js(self, expression, timeout=30):
        return self.app.run(expression, timeout)

    def tokend_cookies(self, url=None):
        reply = self.daemon.call(B + "GetCookies", url=url or self.origin + "/")[1]["parameters"]
        return {c["name"]: c["value"] for c in reply["cookies"]}

    def sent_cookies(self):
        """The cookies on a request the page makes now."""
        return cookie_dict(self.js("fetch('/echo').then(r => r.json()).then(j => j.cookie)"))

    def navigate(self, path):
        """Navigates the page (a main-frame navigation) and waits until the new page runs.
        `path` may be a URL on another origin (the same app under another name)."""
        loads = len([r for r in self.app.requests if r[0] == "/ready"])
        loaded = lambda: len([r for r in self.app.requests if r[0] == "/ready"]) > loads
        here = "location.href" if "://" in path else "location.pathname + location.search"
        for _ in range(5):  # a command can be lost with a poll the network process dropped
            target = json.dumps(path)
            self.app.commands.put({"id": 0, "js": f"{here} === {target} || location.assign({target})"})
            try:
                wait_for(loaded, 5, f"navigation to {path}")
                break
            except AssertionError:
                continue
        assert self.js(f"Promise.resolve({here})") == path

    def close(self):
        self.view.close()
        self.app.stop()


@pytest.fixture(params=list(APPS))
def app(request, display, server, make_tokend, workdir):
    instance = App(display, server, make_tokend, workdir, kind=request.param)
    yield instance
    if instance.view.process.returncode not in (None, 0):
        print(instance.view.logs())
    instance.close()


def test_page_gets_the_token_tokend_gives_and_cookies_are_in_before_the_page_runs(app):
    from_page = app.js("tokend.getToken()")
    from_tokend = app.daemon.call(B + "GetToken")[1]["parameters"]["token"]
    assert from_page == from_tokend
    cookies = app.tokend_cookies()
    assert {"sid", "tracker"} <= cookies.keys(), cookies
    # The very first request the web view made carried tokend's cookies, the HttpOnly sid included ...
    path, header = app.app.requests[0]
    assert path == "/remote"
    assert cookie_dict(header) == cookies
    # ... and the page's first script saw the ones a script may see (sid is HttpOnly).
    assert app.js("Promise.resolve(window.initialCookie)") == f"tracker={cookies['tracker']}"


def test_hundred_page_refreshes_after_a_401_cause_one_grant(app):
    generation = app.js("tokend.getToken()")["generation"]
    before = len(app.server.grants("refresh_token"))
    tokens = app.js(f"Promise.all(Array.from({{length: 100}}, () => tokend.refresh({{staleGeneration: {generation}}})))")
    assert len(tokens) == 100
    assert {t["generation"] for t in tokens} == {generation + 1}
    assert len({t["accessToken"] for t in tokens}) == 1
    assert len(app.server.grants("refresh_token")) - before == 1


def test_refresh_cookies_are_in_the_web_view_before_the_token_and_deletions_follow(app):
    """Every refresh answer sets sid to one more; the first request the page makes
    after getting the new token carries it. The server deletes `tracker` on the
    second refresh; a deletion in tokend leaves the web view; logout empties it."""
    assert "tracker" in app.sent_cookies()
    for _ in range(5):
        generation = app.js("tokend.getToken()")["generation"]
        sent = app.js(f"tokend.refresh({{staleGeneration: {generation}}})"
                      ".then(t => fetch('/echo').then(r => r.json()).then(j => [t.generation, j.cookie]))")
        assert sent[0] == generation + 1
        assert cookie_dict(sent[1])["sid"] == app.tokend_cookies()["sid"], sent
        assert "tracker" not in sent[1]
    assert app.js("Promise.resolve(window.events.filter(e => e[0] === 'refreshed').length)") >= 5
    # A cookie tokend deletes leaves the web view.
    app.js("fetch('/set?name=extra&value=1')")
    wait_for(lambda: "extra" in app.tokend_cookies(), 10, "the site's cookie in tokend")
    app.daemon.call(B + "DeleteCookies", url=app.app.origin + "/", name="extra")
    wait_for(lambda: "extra" not in app.sent_cookies(), 10, "tokend's deletion in the web view")
    # Logout empties the web view's cookies for the origin and tells the page.
    assert app.daemon.ctl("logout").returncode == 0
    wait_for(lambda: app.sent_cookies() == {}, 10, "cookies gone from the web view")
    wait_for(lambda: app.js("Promise.resolve(window.events.some(e => e[0] === 'loggedOut'))"), 5, "loggedOut event")


def test_site_cookies_reach_tokend_without_echo(app):
    app.js("fetch('/set?name=app&value=v1')")  # the site's Set-Cookie
    wait_for(lambda: app.tokend_cookies().get("app") == "v1", 10, "the site's cookie in tokend's jar")
    app.js("Promise.resolve(document.cookie = 'script=s1; path=/')")  # a page script's write
    wait_for(lambda: app.tokend_cookies().get("script") == "s1", 10, "the script's cookie in tokend's jar")
    app.js("fetch('/set?name=app&delete=1')")
    wait_for(lambda: "app" not in app.tokend_cookies(), 10, "the site's deletion in tokend's jar")
    app.js("Promise.resolve(document.cookie = 'script=; path=/; max-age=0')")
    wait_for(lambda: "script" not in app.tokend_cookies(), 10, "the script's deletion in tokend's jar")
    # No echo: with nothing more happening, the jar's version settles. A navigation waits for a
    # reconcile queued behind every operation before it, so each one is a full turn of the web view.
    version = lambda: app.daemon.call(B + "GetStatus")[1]["parameters"]["status"]["cookieVersion"]
    app.navigate("/remote?settled")
    settled = version()
    app.navigate("/remote?still-settled")
    app.navigate("/remote?settled")
    assert version() == settled
    assert app.sent_cookies() == app.tokend_cookies()


def test_cookies_come_back_after_the_network_process_is_killed(app):
    cookies = app.tokend_cookies()
    assert app.sent_cookies() == cookies
    network = app.view.children("WebKitNetworkProcess")
    assert len(network) == 1, network
    os.kill(network[0], signal.SIGKILL)
    wait_for(lambda: app.view.children("WebKitNetworkProcess") != network, 20, "the network process gone")
    # The page is reloaded or still there; either way the next navigation carries tokend's cookies.
    app.navigate("/remote?after-kill")
    header = [h for path, h in app.app.requests if path == "/remote"][-1]
    assert cookie_dict(header) == cookies
    assert app.sent_cookies() == cookies
    assert "its cookie store is gone" in app.view.logs()
    assert app.tokend_cookies() == cookies  # the loss was not taken for deletions


def test_a_crashed_web_process_reloads_its_page(app):
    cookies = app.tokend_cookies()
    loads = len([r for r in app.app.requests if r[0] == "/ready"])
    web = app.view.descendants("WebKitWebProcess")
    assert web, "no WebKitWebProcess below tokend-webview"
    for pid in web:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len([r for r in app.app.requests if r[0] == "/ready"]) > loads, 30, "the page loaded again")
    assert cookie_dict([h for path, h in app.app.requests if path == "/remote"][-1]) == cookies
    assert app.js("tokend.getToken()")["accessToken"]
    assert "the web process ended" in app.view.logs()


def test_other_origins_get_no_token_and_no_cookies(app):
    other_port = WebApp()  # same host, another port: the relay runs, the native side refuses
    other_host = WebApp(host="localhost")  # another host: no relay at all
    try:
        app.app.commands.put({"id": 0, "js": f"location.assign('{other_port.origin}/remote')"})
        assert other_port.run("tokend.getToken()") == {"error": "io.tokend.Broker.PermissionDenied"}
        other_port.commands.put({"id": 0, "js": f"location.assign('{other_host.origin}/remote')"})
        answer = other_host.run("tokend.request('GetToken', {}, 1500)")
        assert answer["error"] == "Error"  # no answer: the helper's timeout
        assert all(header == "" for _, header in other_host.requests)
        assert "refused GetToken from " + other_port.origin in app.view.logs()
    finally:
        other_port.stop()
        other_host.stop()


def test_tokend_restart_the_web_view_reconnects_and_catches_up(app):
    app.daemon.stop(signal.SIGKILL)
    assert app.js("tokend.getToken()") == {"error": "io.tokend.Bridge.Disconnected"}
    app.daemon.start()
    assert app.daemon.ctl("refresh").returncode == 0
    wait_for(lambda: app.sent_cookies().get("sid") == app.tokend_cookies()["sid"], 20,
             "the web view caught up after tokend's restart")
    assert app.js("tokend.getToken()") == app.daemon.call(B + "GetToken")[1]["parameters"]["token"]
    logs = app.view.logs()
    assert "tokend is not available" in logs and "tokend is back" in logs


def test_refresh_token_never_reaches_the_page_or_the_web_view(app):
    received = app.js("Promise.all([tokend.getToken(), tokend.refresh({staleGeneration: 1}), tokend.getToken()])"
                      ".then(r => JSON.stringify(r))")
    seen = app.js("Promise.resolve(JSON.stringify(window.seen))")
    pids = [app.view.process.pid] + app.view.descendants()
    environments = [open(f"/proc/{pid}/environ", "rb").read() for pid in pids]
    app.view.close()
    refresh_tokens = issued_refresh_tokens(app.server)
    assert len(refresh_tokens) >= 2
    files = scan_for_secrets(app.home, refresh_tokens)
    print(f"\n{files} files the web view wrote, {len(pids)} processes' environments, {len(seen)} bytes the page received")
    for environment in environments:
        assert not [t for t in refresh_tokens if t in environment]
    assert len(pids) >= 3  # the app, WebKit's network process and its web process
    assert not [t for t in refresh_tokens if t.decode() in received + seen]
    assert "accessToken" in received and "accessToken" in seen


def test_malformed_page_messages_get_an_error_and_break_nothing(app):
    # The page's own world cannot reach the relay's handler; a relay-shaped
    # message with nonsense in it gets an error, and the web view goes on.
    assert app.js("Promise.resolve(typeof window.webkit?.messageHandlers?.tokend)") == "undefined"
    answers = app.js("""Promise.all([
        tokend.request('Logout', {}),
        tokend.request('GetToken', 'not an object'),
        tokend.request('GetToken', {minValidSeconds: 'soon'}),
    ].map((answer) => answer.catch((e) => e.name)))""")
    assert answers == ["io.tokend.Broker.PermissionDenied", "io.tokend.Bridge.InvalidRequest",
                       "org.varlink.service.InvalidParameter"]
    assert app.js("tokend.getToken()")["accessToken"]
    assert app.view.alive()
    # It ends cleanly when asked to.
    app.view.close()
    assert app.view.process.returncode == 0, app.view.logs()


def test_page_to_token_latency_and_screenshot(app, display):
    """Measures, not asserts: p50/p99 of 300 sequential cached GetToken calls
    from the page. Then a screenshot of the signed-in page (README's picture
    when TOKEND_SCREENSHOT names where to put it; the other apps' beside it, named for the app)."""
    # WebKit's clock for pages ticks in whole milliseconds: the mean comes from the total.
    times, total = app.js("""(async () => {
        const times = [], start = performance.now();
        for (let i = 0; i < 300; i++) { const t0 = performance.now(); await tokend.getToken(); times.push(performance.now() - t0); }
        return [times.sort((a, b) => a - b), performance.now() - start];
    })()""")
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    print(f"\npage -> token through {app.kind}: p50 {p50:.0f} ms, p99 {p99:.0f} ms (1 ms clock), "
          f"mean {total / 300:.2f} ms (300 calls)")
    assert len(times) == 300
    app.navigate("/remote?show")
    wait_for(lambda: app.js("Promise.resolve(document.querySelector('h1')?.textContent)") == "Signed in through tokend",
             10, "the signed-in page")
    app.js("new Promise((painted) => requestAnimationFrame(() => requestAnimationFrame(painted)))")
    path = os.environ.get("TOKEND_SCREENSHOT") or os.path.join(app.home, "screenshot.png")
    if app.kind != "swift":
        path = path.removesuffix(".png") + f"-{app.kind}.png"
    display.screenshot(path)
    assert os.path.getsize(path) > 10_000


def test_a_site_clearing_its_own_cookies_stays_cleared(app):
    """The site's logout clears both cookies its scripts can reach in one go: the store is empty,
    which is the site's doing, not a lost store. They leave tokend's jar and are not put back."""
    app.js("Promise.resolve(document.cookie = 'pref=1; path=/')")
    wait_for(lambda: "pref" in app.tokend_cookies(), 10, "the script's cookie in tokend's jar")
    for name in ("csrf", "sid"):  # out of a script's reach: csrf's path is /o/token, sid is HttpOnly
        app.daemon.call(B + "DeleteCookies", name=name)
    wait_for(lambda: "sid" not in app.sent_cookies(), 10, "tokend's deletions in the web view")  # in order: csrf's first
    assert app.sent_cookies().keys() == {"tracker", "pref"}
    app.js("Promise.resolve([document.cookie = 'tracker=; path=/; max-age=0', document.cookie = 'pref=; path=/; max-age=0'])")
    wait_for(lambda: not {"tracker", "pref"} & app.tokend_cookies().keys(), 10, "the site's deletions in tokend's jar")
    app.navigate("/remote?logged-out")  # every reconcile queued before it has run
    assert app.sent_cookies() == {} and app.tokend_cookies() == {}
    assert "emptied" not in app.view.logs()


def test_cookies_tokend_changes_while_the_web_view_writes_its_store_are_kept(app):
    """tokend changes cookies while the web view is writing other changes of tokend into its store:
    none of them is read back as the site's change or deletion (and sent back to tokend, which would
    undo it for every client) by a later reconcile."""
    def change(names, turns):
        for turn in range(turns):
            app.daemon.call(B + "ImportCookies", url=app.origin + "/", setCookie=[f"{name}={turn}; Path=/" for name in names])
    writers = [threading.Thread(target=change, args=([f"w{writer}x{i}" for i in range(3)], 30)) for writer in range(3)]
    for writer in writers:
        writer.start()
    change([f"b{i}" for i in range(20)], 30)
    for writer in writers:
        writer.join()
    last = {f"b{i}": "29" for i in range(20)} | {f"w{writer}x{i}": "29" for writer in range(3) for i in range(3)}
    wait_for(lambda: last.items() <= app.sent_cookies().items(), 20, "tokend's last values in the web view")
    app.navigate("/remote?settled")
    assert last.items() <= app.tokend_cookies().items()
    assert last.items() <= app.sent_cookies().items()


@pytest.fixture(params=list(APPS))
def named_app(request, display, server, make_tokend, workdir):
    """The app as http://app.example.test:PORT (the session's web origin); evil.example.test is the
    same loopback app under a name that is no web origin's host."""
    instance = App(display, server, make_tokend, workdir, host="app.example.test", other_names=["evil.example.test"],
                   kind=request.param)
    yield instance
    instance.close()


def test_a_page_on_another_host_cannot_put_parent_domain_cookies_into_tokend(named_app):
    app = named_app
    app.navigate(f"http://evil.example.test:{app.app.server.server_address[1]}/remote")
    app.js("Promise.resolve(document.cookie = 'tossed=script; domain=example.test; path=/')")
    header_value = urllib.parse.quote("header; Domain=example.test")  # the test app's Set-Cookie line, with a Domain
    app.js(f"fetch('/set?name=tossed2&value={header_value}')")
    for name in ("tossed", "tossed2"):
        wait_for(lambda: f"refused the site's cookie {name} for example.test" in app.view.logs(), 10, f"{name} refused")
    app.navigate(app.origin + "/remote")
    assert not {"tossed", "tossed2"} & app.tokend_cookies().keys()
    assert not {"tossed", "tossed2"} & app.sent_cookies().keys()  # nor does the web view send them to the app
    # The web origin's own host still gets its cookies to tokend.
    app.js("Promise.resolve(document.cookie = 'own=1; path=/')")
    wait_for(lambda: app.tokend_cookies().get("own") == "1", 10, "the app's own cookie in tokend's jar")


ADMIN_API, MAIL_API = "https://admin.api.test/", "https://mail.api.test/"


@pytest.fixture(params=list(APPS))
def resource_app(request, display, make_tokend, workdir):
    """A session serving two APIs from one login, of which pages may have the mail API's tokens
    (web-resources), at a provider that issues one resource per token (keep-wide): the session's own
    token is for the admin API, the provider's default (the first)."""
    server = mode_server(os.path.join(workdir, "as"), "keep-wide")
    try:
        instance = App(display, server, make_tokend, workdir, kind=request.param, resources=[ADMIN_API, MAIL_API],
                       session={"web-resources": json.dumps([MAIL_API]),
                                "introspection-endpoint": json.dumps(server.base + "/o/introspect/")})
        yield instance
        instance.close()
    finally:
        server.stop()


def test_a_page_gets_only_tokens_whose_audience_pages_may_have(resource_app):
    """The web view marks a page's calls with the page's origin (page), and tokend hands out only a
    token whose audience is within web-resources: what the page received is shown by introspection."""
    app = resource_app
    answer = lambda call: app.js(f"{call}.catch((e) => ({{error: e.name, parameters: e.parameters}}))")
    mail = answer(f"tokend.getToken({{resource: {json.dumps(MAIL_API)}}})")
    assert introspect(app.server, mail["accessToken"]).get("aud") == [MAIL_API], mail
    fresh = answer(f"tokend.refresh({{resource: {json.dumps(MAIL_API)}, staleGeneration: {mail['generation']}}})")
    assert fresh["generation"] > mail["generation"]
    assert introspect(app.server, fresh["accessToken"]).get("aud") == [MAIL_API]
    # The session's own token covers the admin API: the page asks for no resource by name, and tokend refuses it.
    own = answer("tokend.getToken()")
    assert own["error"] == B + "ResourceNotAllowed" and own["parameters"]["resource"] == ADMIN_API, own
    assert "web-resources" in own["parameters"]["reason"]
    # Without the page's mark the same call is the app's own (root's), and answered: the refusal was the page rule.
    root = app.daemon.call(B + "GetToken")[1]
    assert introspect(app.server, root["parameters"]["token"]["accessToken"]).get("aud") == [ADMIN_API], root
    # Named, a resource outside web-resources is refused by the web view itself, before tokend is asked.
    named = answer(f"tokend.getToken({{resource: {json.dumps(ADMIN_API)}}})")
    assert named["error"] == "io.tokend.Broker.PermissionDenied" and named["parameters"]["resource"] == ADMIN_API
    assert "resource not among session default's web-resources" in app.view.logs()


@pytest.mark.parametrize("kind", [name for name in APPS if name == "swift"])
def test_a_page_first_asked_for_after_the_3_s_wait_runs_when_the_jar_never_changed(kind, display, server, make_tokend,
                                                                                    workdir):
    """A session whose cookie jar never changed (no login) gets no cookies event on subscribing: its
    status event alone tells the web view it has caught up. The web process is stopped before it
    asks for anything and held past the 3 s a navigation waits for tokend; resumed, its first page
    runs. (In the Swift core the C and GI apps share: the Swift app alone.)"""
    site = WebApp()
    daemon = make_tokend(server, **{"web-origins": json.dumps([site.origin])}).start()
    view = WebView(display, daemon.socket, site.origin + "/remote", os.path.join(workdir, "webview.log"),
                   os.path.join(workdir, "home"), app=kind)
    try:
        web = wait_for(lambda: view.descendants("WebKitWebProcess"), 30, "the web process")
        for pid in web:
            os.kill(pid, signal.SIGSTOP)
        state = lambda pid: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        wait_for(lambda: all(state(pid) == "T" for pid in web), 10, "the web process stopped")
        # WebKit's IPC connection has a thread of its own from its start: without one, nothing was asked yet.
        threads = [open(f"/proc/{pid}/task/{task}/comm").read().strip()
                   for pid in web for task in os.listdir(f"/proc/{pid}/task")]
        assert "ReceiveQueue" not in threads, threads
        time.sleep(5)  # the wait began before the web process did: tokend-webview attaches, then loads the page
        for pid in web:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: any(path == "/ready" for path, _ in site.requests), 30, "the page running in the web view")
        assert daemon.call(B + "GetStatus")[1]["parameters"]["status"]["cookieVersion"] == 0
    finally:
        view.close()  # a web process still stopped ends with it (bwrap's pid namespace)
        site.stop()
