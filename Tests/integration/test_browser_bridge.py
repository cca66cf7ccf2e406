# Over 90 s of `make test` (docs/testing.md): every test starts headless Chromium or Firefox ESR with the
# extension (10-25 s each on a busy 2-core machine), one after another in the browser group (273 s summed).
"""The browser bridge in real browsers, one suite for both: Chromium (the
extension loaded unpacked, the host registered in the profile with
`tokenctl browser-bridge --user-data-dir`) and Firefox ESR (the extension
installed as a temporary add-on over WebDriver BiDi, the host registered for
the user with `tokenctl browser-bridge --browser firefox`). A web app on a
loopback origin, tokend and the real authorization server (rotation, reuse
protection) behind them."""
import json
import os
import signal
import subprocess
import time

import pytest

from browser import Browser
from firefox import Firefox
from conftest import BIN, BROWSER, ROOT, issued_refresh_tokens, login, scan_for_secrets, wait_for
from resources import mode_server, password_grant
from webapp import WebApp

pytestmark = BROWSER  # every test here runs Chromium or Firefox

B = "io.tokend.Broker."
EXTENSION = os.path.join(ROOT, "web", "extension")


class Bridge:
    """A tokend session with the app's origin in web-origins, a browser with the extension."""

    def __init__(self, kind, server, make_tokend, workdir, login_first=True, **session):
        """`login_first`: logged in with the server's password grant (a test whose session needs
        a grant of its own, with resources, logs in itself: tokenctl login now exits 4 for a
        refresh token the provider refuses the session's refresh for)."""
        self.kind = kind
        self.app = WebApp()
        self.daemon = make_tokend(server, **{"web-origins": json.dumps([self.app.origin]), **session}).start()
        self.server = server
        self.refresh_token = login(self.daemon, server) if login_first else None
        self.profile = os.path.join(workdir, "profile")
        self.home = os.path.join(workdir, "home")  # Firefox finds the host under $HOME/.mozilla
        if kind == "firefox":
            register = ["--browser", "firefox"]
        else:
            register = ["--user-data-dir", self.profile]
        run = subprocess.run([os.path.join(BIN, "tokenctl"), "browser-bridge", *register], capture_output=True,
                             text=True, env=dict(os.environ, HOME=self.home))
        assert run.returncode == 0, run.stderr
        self.browser = None
        self.open_browser()

    def open_browser(self):
        if self.kind == "firefox":
            env = dict(os.environ, HOME=self.home, TOKEND_SOCKET=self.daemon.socket)
            self.browser = Firefox(extension=EXTENSION, env=env, profile=self.profile)
        else:
            self.browser = Browser(extension=EXTENSION, env={"TOKEND_SOCKET": self.daemon.socket}, profile=self.profile)
        self.open(self.app.origin)

    def open(self, origin):
        """Opens the app's page, reloading until the extension's content script
        answers (with a fresh profile the first load can come before it is registered)."""
        for _ in range(60):
            self.browser.get(origin + "/page")
            if self.js("Promise.race([window.bridgeReady, new Promise(r => setTimeout(() => r(false), 500))])"):
                return
        raise AssertionError(f"the extension's content script never answered on {origin}")

    def js(self, expression):
        """Evaluates a promise-returning expression in the page; errors come back as {'error': name}."""
        return self.browser.run(expression)

    def echo(self):
        """The Cookie header the browser sends to the app."""
        return self.js("fetch('/echo').then(r => r.json()).then(j => j.cookie)")

    def tokend_cookies(self, url=None):
        reply = self.daemon.call(B + "GetCookies", url=url or self.app.origin + "/")[1]["parameters"]
        return {c["name"]: c["value"] for c in reply["cookies"]}

    def close(self):
        self.browser.close()
        self.app.stop()


@pytest.fixture(params=["chromium", "firefox"])
def bridge(request, server, make_tokend, workdir):
    instance = Bridge(request.param, server, make_tokend, workdir)
    yield instance
    instance.close()


def browser_cookie_values(bridge):
    return dict(pair.split("=", 1) for pair in bridge.echo().split("; ") if pair)


def test_page_gets_the_token_tokend_gives(bridge):
    from_page = bridge.js("tokend.getToken()")
    from_tokend = bridge.daemon.call(B + "GetToken")[1]["parameters"]["token"]
    assert from_page == from_tokend
    # tokend's cookies (set by the token endpoint on 127.0.0.1) are the browser's.
    assert browser_cookie_values(bridge) == bridge.tokend_cookies()


def test_hundred_page_calls_after_a_401_cause_one_refresh(bridge):
    generation = bridge.js("tokend.getToken()")["generation"]
    before = len(bridge.server.grants("refresh_token"))
    tokens = bridge.js(
        f"Promise.all(Array.from({{length: 100}}, () => tokend.refresh({{staleGeneration: {generation}}})))")
    assert len(tokens) == 100
    assert {t["generation"] for t in tokens} == {generation + 1}
    assert len({t["accessToken"] for t in tokens}) == 1
    assert len(bridge.server.grants("refresh_token")) - before == 1


def test_refresh_cookies_reach_the_browser_before_the_token(bridge):
    """Every refresh answer sets sid to one more; the first request the page
    makes after getting the new token already carries it. The server deletes
    `tracker` on the second refresh: it disappears from the browser."""
    assert "tracker" in browser_cookie_values(bridge)
    for _ in range(5):
        generation = bridge.js("tokend.getToken()")["generation"]
        sent = bridge.js(
            f"tokend.refresh({{staleGeneration: {generation}}})"
            ".then(t => fetch('/echo').then(r => r.json()).then(j => [t.generation, j.cookie]))")
        assert sent[0] == generation + 1
        sid = dict(pair.split("=", 1) for pair in sent[1].split("; "))["sid"]
        assert sid == bridge.tokend_cookies()["sid"], sent
        assert "tracker" not in sent[1]
    assert bridge.js("Promise.resolve(window.events.filter(e => e[0] === 'refreshed').length)") >= 5
    # Logout empties the browser's cookies for the origin and tells the page.
    assert bridge.daemon.ctl("logout").returncode == 0
    wait_for(lambda: bridge.echo() == "", 10, "cookies gone from the browser")
    wait_for(lambda: bridge.js("Promise.resolve(window.events.some(e => e[0] === 'loggedOut'))"), 5, "loggedOut event")


def test_cookies_set_in_the_browser_reach_tokend_and_deletions_come_back(bridge):
    bridge.js("fetch('/set?name=app&value=v1')")
    wait_for(lambda: bridge.tokend_cookies().get("app") == "v1", 10, "the app's cookie in tokend's jar")
    bridge.js("fetch('/set?name=app&value=v2')")
    wait_for(lambda: bridge.tokend_cookies().get("app") == "v2", 10, "the replaced value in tokend's jar")
    bridge.js("fetch('/set?name=app&delete=1')")
    wait_for(lambda: "app" not in bridge.tokend_cookies(), 10, "the deletion in tokend's jar")
    # tokend deletes: the browser follows (DeleteCookies reaches every subscriber).
    assert "sid" in browser_cookie_values(bridge)
    deleted = bridge.daemon.ctl("cookies", "--delete", bridge.app.origin + "/", "--name", "sid")
    assert deleted.returncode == 0 and "deleted 1 cookie" in deleted.stdout, deleted.stderr
    wait_for(lambda: "sid" not in browser_cookie_values(bridge), 10, "sid removed from the browser")
    # No loop: the jar's version settles. A loop has no event to wait for; its absence is time without changes.
    time.sleep(1)  # lets the browser's answer to the deletion, if any, reach tokend
    version = bridge.daemon.call(B + "GetCookies", url=bridge.app.origin + "/")[1]["parameters"]["version"]
    time.sleep(1.5)  # the situation: 1.5 s in which a loop would change the jar many times
    assert bridge.daemon.call(B + "GetCookies", url=bridge.app.origin + "/")[1]["parameters"]["version"] == version


def test_other_origins_get_a_refusal_and_no_cookies(bridge):
    other_port = WebApp()  # same host, another port: the content script runs, the worker refuses
    other_host = WebApp(host="localhost")  # another host: no content script at all
    try:
        bridge.open(other_port.origin)
        assert bridge.js("tokend.getToken()") == {"error": "io.tokend.Broker.PermissionDenied"}
        bridge.browser.get(other_host.origin + "/page")
        answer = bridge.js("tokend.request('GetToken', {}, 1500)")
        assert answer["error"] == "Error"  # no answer: the helper's timeout
        assert bridge.echo() == ""
        assert not [c for c in bridge.browser.cookies() if c["domain"].endswith("localhost")]
    finally:
        other_port.stop()
        other_host.stop()


def test_extension_catches_up_after_tokend_and_browser_restart(bridge):
    # tokend killed and restarted: the extension resubscribes from its last version.
    bridge.daemon.stop(signal.SIGKILL)
    bridge.daemon.start()
    assert bridge.daemon.ctl("refresh").returncode == 0
    wait_for(lambda: browser_cookie_values(bridge).get("sid") == bridge.tokend_cookies()["sid"], 15,
             "the browser caught up after tokend's restart")
    # The browser closed while a refresh happens: it catches up when it starts again.
    bridge.browser.close()
    assert bridge.daemon.ctl("refresh").returncode == 0
    bridge.open_browser()
    wait_for(lambda: browser_cookie_values(bridge).get("sid") == bridge.tokend_cookies()["sid"], 15,
             "the browser caught up after its own restart")
    assert bridge.js("tokend.getToken()") == bridge.daemon.call(B + "GetToken")[1]["parameters"]["token"]


def test_refresh_token_never_reaches_the_browser(bridge):
    received = bridge.js(
        "Promise.all([tokend.getToken(), tokend.refresh({staleGeneration: 1}), tokend.getToken()])"
        ".then(r => JSON.stringify(r))")
    bridge.browser.close()  # the profile (kept: it is the bridge's) is complete on disk
    refresh_tokens = issued_refresh_tokens(bridge.server)
    assert len(refresh_tokens) >= 2
    files = scan_for_secrets(bridge.profile, refresh_tokens)
    assert files > 20
    assert not [t for t in refresh_tokens if t.decode() in received]
    assert "accessToken" in received


def test_page_to_token_latency(bridge):
    """Measures, not asserts: p50/p99 of 300 sequential cached GetToken calls from the page."""
    times = bridge.js("""(async () => {
        const times = [];
        for (let i = 0; i < 300; i++) { const t0 = performance.now(); await tokend.getToken(); times.push(performance.now() - t0); }
        return times.sort((a, b) => a - b);
    })()""")
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    print(f"\npage -> token through the bridge in {bridge.kind}: p50 {p50:.2f} ms, p99 {p99:.2f} ms (300 calls)")
    assert len(times) == 300


@pytest.mark.parametrize("kind", ["chromium", "firefox"])
def test_page_gets_tokens_for_its_web_resources_only(kind, make_tokend, workdir):
    """One login, two APIs, of which pages may ask for one (web-resources): the page gets that
    resource's token and its refreshes' events; the other is refused before tokend is asked. Against
    a provider that issues one resource per token (per-resource: each key its own token and events)."""
    shared, private = "https://shared.api.test/", "https://private.api.test/"
    server = mode_server(os.path.join(workdir, "keep-wide"), "keep-wide")
    bridge = Bridge(kind, server, make_tokend, workdir, login_first=False, scope='"read write"',
                    resources=json.dumps([shared, private]),
                    **{"web-resources": json.dumps([shared]),
                       "introspection-endpoint": json.dumps(server.base + "/o/introspect/")})
    try:
        status, grant = password_grant(server, [shared, private], "read write")
        assert status == 200, grant
        assert "error" not in bridge.daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
        bridge.js(f"Promise.resolve(window.keyed = [], tokend.on('refreshed', (e) => keyed.push([e.resource, "
                  f"e.generation]), {{resource: {json.dumps(shared)}}}))")
        token = bridge.js(f"tokend.getToken({{resource: {json.dumps(shared)}}})")
        assert token == bridge.daemon.call(B + "GetToken", resource=shared)[1]["parameters"]["token"]
        assert token["resource"] == shared
        own_generation = bridge.daemon.call(B + "GetStatus")[1]["parameters"]["status"]["generation"]
        fresh = token
        while fresh["generation"] <= own_generation:  # the key's generations pass the session's own
            stale = fresh["generation"]
            fresh = bridge.js(f"tokend.refresh({{staleGeneration: {stale}, resource: {json.dumps(shared)}}})")
            assert (fresh["resource"], fresh["generation"]) == (shared, stale + 1)
        wait_for(lambda: [shared, fresh["generation"]] in bridge.js("Promise.resolve(window.keyed)"), 10,
                 "the key's refreshed event in the page")
        heard = bridge.js("Promise.resolve(window.events.filter(e => e[0] === 'refreshed').map(e => e[1]))")
        assert max(heard, default=0) <= own_generation, "the session's own listeners hear no other key's refresh"
        upstream = len(server.grants())
        refused = bridge.js(f"tokend.getToken({{resource: {json.dumps(private)}}})"
                            ".catch(e => ({error: e.name, resource: e.parameters.resource, reason: e.parameters.reason}))")
        assert refused["error"] == "org.varlink.service.PermissionDenied" and refused["resource"] == private, refused
        assert "web-resources" in refused["reason"]
        assert len(server.grants()) == upstream, "no upstream call for a refused resource"
        own = bridge.js("tokend.getToken()")
        assert own == bridge.daemon.call(B + "GetToken")[1]["parameters"]["token"], "a call without resource as before"
    finally:
        bridge.close()
        server.stop()
