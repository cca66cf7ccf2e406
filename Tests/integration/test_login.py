# Over 90 s of `make test` (docs/testing.md): logins through headless Chromium (the browser group), discovery
# waiting for an issuer that comes up later, device logins polled at the provider's interval (164 s summed on
# the busy 2-core machine).
"""Logins from nothing against django-oauth-toolkit (OIDC on): discovery from
the issuer, the device grant and the browser login with PKCE, with the user's
part done in a real headless Chromium."""
import http.server
import json
import os
import sys
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from browser import Browser
from conftest import BROWSER, AuthServer, BIN, free_port, varlink_call, wait_for

SCOPE = "openid profile email read"
B = "io.tokend.Broker."


def login_sessions(server):
    """A device session "dev" (the device endpoint given explicitly: the test
    server does not advertise it) and a browser session "web"; everything else
    comes from discovery."""
    return {
        "dev": {"issuer": server.issuer, "device-authorization-endpoint": server.base + "/o/device-authorization/",
                "client-id": "tokend-device", "client-auth": "none", "scope": SCOPE},
        "web": {"issuer": server.issuer, "client-id": "tokend-browser", "client-auth": "none", "scope": SCOPE},
    }


@pytest.fixture
def oidc_server(workdir):
    instance = AuthServer(os.path.join(workdir, "as"), extra=["--oidc"])
    yield instance
    instance.stop()


@pytest.fixture
def browser():
    instance = Browser()
    yield instance
    instance.close()


def start_login(daemon, flow, session, socket=None):
    """tokenctl login in the background; returns the process and the URL it printed."""
    process = subprocess.Popen(
        [os.path.join(BIN, "tokenctl"), "login", f"--{flow}", "--session", session, "--socket", socket or daemon.socket],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    while True:
        line = process.stdout.readline()
        assert line, f"tokenctl ended early: {''.join(printed)} {process.stderr.read()}"
        printed.append(line)
        if flow == "device" and line.startswith("Or open "):
            return process, line.split()[-1], "".join(printed)
        if flow == "browser" and line.strip().startswith("http"):
            return process, line.strip(), "".join(printed)


def finish(process):
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def subscribe(path, session):
    """A Subscribe connection; returns a function that reads the events so far."""
    import socket as socketlib
    s = socketlib.socket(socketlib.AF_UNIX)
    s.connect(path)
    s.sendall(json.dumps({"method": B + "Subscribe", "parameters": {"session": session}, "more": True}).encode() + b"\0")
    s.settimeout(0.2)
    buffer = bytearray()

    def events():
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buffer.extend(chunk)
        except (TimeoutError, BlockingIOError):
            pass
        return [json.loads(f)["parameters"]["event"] for f in bytes(buffer).split(b"\0") if f]
    return s, events


@BROWSER
def test_device_login_end_to_end(oidc_server, make_tokend, browser):
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    sub, events = subscribe(daemon.socket, "dev")
    process, url, printed = start_login(daemon, "device", "dev")
    assert "enter the code" in printed and "/o/device/" in printed
    browser.approve_device(url)
    code, out, err = finish(process)
    assert code == 0, err
    assert "alice <alice@example.test>" in out and "state:        active" in out
    assert "Waiting for approval" in err
    status = daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]
    assert (status["subject"], status["username"], status["email"]) == ("1", "alice", "alice@example.test")
    token = daemon.call(B + "GetToken", session="dev")[1]["parameters"]["token"]
    assert token["generation"] == 1
    # The access token is the server's, and the refresh grant works afterwards.
    assert len(oidc_server.grants("urn:ietf:params:oauth:grant-type:device_code")) >= 1
    refreshed = daemon.call(B + "Refresh", session="dev", staleGeneration=1)[1]["parameters"]["token"]
    assert refreshed["generation"] == 2
    assert [g["status"] for g in oidc_server.grants("refresh_token")] == [200]
    wait_for(lambda: "loggedIn" in events(), 5, "loggedIn event")
    assert events()[:3] == ["status", "loginPending", "loggedIn"]
    sub.close()


def authorization_url(start_url):
    """Where tokenctl's start page sends this user's browser (its Location)."""
    class NoFollow(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        urllib.request.build_opener(NoFollow).open(start_url, timeout=10)
    except urllib.error.HTTPError as redirect:
        assert redirect.code == 302, redirect.code
        return redirect.headers["Location"]
    raise AssertionError("the start page did not redirect")


@BROWSER
def test_browser_login_end_to_end(oidc_server, make_tokend, browser):
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    process, start, _ = start_login(daemon, "browser", "web")
    assert "/start/" in start and "state=" not in start, "tokenctl prints its own start page, not the provider's URL"
    url = authorization_url(start)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["nonce"] and query["state"] and query["redirect_uri"][0].startswith("http://127.0.0.1:")
    page = browser.authorize(url)
    assert "Logged in" in page and "alice" in page and "close this tab" in page
    code, out, err = finish(process)
    assert code == 0, err
    assert "alice <alice@example.test>" in out
    grants = oidc_server.grants("authorization_code")
    assert [g["status"] for g in grants] == [200]
    assert daemon.call(B + "GetToken", session="web")[1]["parameters"]["token"]["generation"] == 1


@BROWSER
def test_device_login_denied(oidc_server, make_tokend, browser):
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    process, url, _ = start_login(daemon, "device", "dev")
    browser.approve_device(url, accept=False)
    code, out, err = finish(process)
    assert code == 8, (out, err)
    assert "refused" in err and "tokenctl login" in err
    status = daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]
    assert status["state"] == "loginRequired" and status["pendingLogins"] == 0


@BROWSER
def test_browser_login_denied(oidc_server, make_tokend, browser):
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    process, url, _ = start_login(daemon, "browser", "web")
    page = browser.authorize(url, accept=False)
    assert "Login failed" in page and "access_denied" in page
    code, _, err = finish(process)
    assert code == 8 and "refused" in err
    assert oidc_server.grants("authorization_code") == []


def test_device_login_expires(workdir, make_tokend):
    server = AuthServer(os.path.join(workdir, "as"), extra=["--oidc", "--device-expires", "3"])
    try:
        daemon = make_tokend(server, sessions=login_sessions(server)).start()
        started = time.time()
        process, _, _ = start_login(daemon, "device", "dev")
        code, _, err = finish(process)
        assert code == 8 and "expired" in err, err
        assert time.time() - started < 15
        polls = server.grants("urn:ietf:params:oauth:grant-type:device_code")
        assert polls and all(p["error"] in ("authorization_pending", "expired_token") for p in polls)
    finally:
        server.stop()


@BROWSER
def test_device_login_slow_down(workdir, make_tokend, browser):
    """The server answers the first poll slow_down: tokend waits 5 s more (RFC 8628 §3.5)."""
    server = AuthServer(os.path.join(workdir, "as"), extra=["--oidc", "--slow-down", "1"])
    try:
        daemon = make_tokend(server, sessions=login_sessions(server)).start()
        process, url, _ = start_login(daemon, "device", "dev")
        wait_for(lambda: server.grants("urn:ietf:params:oauth:grant-type:device_code"), 10, "first poll")
        browser.approve_device(url)
        code, _, err = finish(process)
        assert code == 0, err
        polls = server.grants("urn:ietf:params:oauth:grant-type:device_code")
        assert polls[0]["error"] == "slow_down" and polls[-1]["status"] == 200
        gaps = [b["t"] - a["t"] for a, b in zip(polls, polls[1:])]
        assert gaps[0] >= 5.9, gaps  # interval 1 s + 5 s
    finally:
        server.stop()


class CallbackCatcher(http.server.BaseHTTPRequestHandler):
    """Stands where tokenctl listens, keeping the URL the browser is sent back to."""
    received = []

    def do_GET(self):
        CallbackCatcher.received.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<h1>caught</h1>")

    def log_message(self, *args):
        pass


@BROWSER
def test_browser_callback_state_checked(oidc_server, make_tokend, browser):
    """A wrong state or issuer is refused and changes nothing; the right
    callback logs in; replaying it finds no login."""
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    port = free_port()
    catcher = http.server.HTTPServer(("127.0.0.1", port), CallbackCatcher)
    threading.Thread(target=catcher.serve_forever, daemon=True).start()
    try:
        redirect = f"http://127.0.0.1:{port}/callback"
        begun = daemon.call(B + "BeginLogin", session="web", flow="browser", redirectUri=redirect)[1]
        login = begun["parameters"]["login"]
        CallbackCatcher.received.clear()
        browser.driver.get(login["authorizationUrl"])
        browser.sign_in_if_asked()
        browser.decide(True)
        wait_for(lambda: CallbackCatcher.received, 20, "callback")
        callback = f"http://127.0.0.1:{port}" + CallbackCatcher.received[0]
        fields = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(callback).query))
        forged = callback.replace(fields["state"], "X" + fields["state"][1:])
        reply = daemon.call(B + "FinishLogin", id=login["id"], callbackUrl=forged)[1]
        assert reply["error"] == B + "InvalidCallback" and "state" in reply["parameters"]["reason"]
        other_issuer = callback + "&iss=" + urllib.parse.quote("https://evil.example/o")
        reply = daemon.call(B + "FinishLogin", id=login["id"], callbackUrl=other_issuer)[1]
        assert reply["error"] == B + "InvalidCallback" and "issuer" in reply["parameters"]["reason"]
        status = daemon.call(B + "GetStatus", session="web")[1]["parameters"]["status"]
        assert status["state"] == "loginRequired" and status["pendingLogins"] == 1
        assert oidc_server.grants("authorization_code") == []
        reply = daemon.call(B + "FinishLogin", id=login["id"], callbackUrl=callback)[1]
        assert reply["parameters"]["status"]["state"] == "active", reply
        reply = daemon.call(B + "FinishLogin", id=login["id"], callbackUrl=callback)[1]
        assert reply["error"] == B + "NoSuchLogin"
        assert len(oidc_server.grants("authorization_code")) == 1
    finally:
        catcher.shutdown()


@BROWSER
def test_discovery_when_the_issuer_comes_up_later(workdir, make_tokend, browser):
    """tokend starts with the issuer down, says so, finds it when it comes up,
    and keeps the document: after a restart with the issuer down again it
    still serves the stored token."""
    port = free_port()

    class Later:
        base = f"http://127.0.0.1:{port}"
        issuer = base + "/o"
        token_url = base + "/o/token/"
    sessions = login_sessions(Later)
    sessions["dev"]["upstream-timeout"] = 3  # each attempt at the absent issuer gives up after 3 s
    daemon = make_tokend(Later, sessions=sessions).start()

    def last_error():
        return daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]["lastError"]
    wait_for(lambda: "discovery from" in last_error(), 40, "the discovery problem in status")
    assert "failed" in last_error()
    reply = daemon.call(B + "BeginLogin", session="dev", flow="device")[1]
    assert reply["error"] == B + "UpstreamUnavailable"
    server = AuthServer(os.path.join(workdir, "as"), port=port, extra=["--oidc"])
    try:
        wait_for(lambda: last_error() is None or "discovery" not in last_error(), 40, "discovery after the issuer came up")
        process, url, _ = start_login(daemon, "device", "dev")
        browser.approve_device(url)
        assert finish(process)[0] == 0
        token = daemon.call(B + "GetToken", session="dev")[1]["parameters"]["token"]
    finally:
        server.stop()
    daemon.stop()
    daemon.start()
    status = daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]
    assert status["state"] == "active" and status["lastError"] is None, status
    assert daemon.call(B + "GetToken", session="dev")[1]["parameters"]["token"] == token
    wait_for(lambda: "using the document kept from before" in daemon.logs(), 40, "the kept document in use")
    assert daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]["lastError"] is None


@BROWSER
def test_refresh_token_never_crosses_the_socket(oidc_server, make_tokend, browser, workdir):
    """Every byte tokenctl and tokend exchange during both logins (and the
    token and status calls after them) is captured; none of the refresh tokens
    the server ever issued is among them."""
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    proxy_path = os.path.join(workdir, "spy")
    capture = os.path.join(workdir, "capture.bin")
    spy = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "socketspy.py"), proxy_path, daemon.socket, capture])
    wait_for(lambda: os.path.exists(proxy_path), 10, "spy socket")
    try:
        process, url, _ = start_login(daemon, "device", "dev", socket=proxy_path)
        browser.approve_device(url)
        assert finish(process)[0] == 0
        process, url, _ = start_login(daemon, "browser", "web", socket=proxy_path)
        browser.authorize(url)
        assert finish(process)[0] == 0
        for session in ("dev", "web"):
            for command in (["token"], ["status", "--json"], ["refresh"]):
                run = subprocess.run([os.path.join(BIN, "tokenctl"), *command, "--session", session, "--socket", proxy_path],
                                     capture_output=True, text=True, timeout=30)
                assert run.returncode == 0, run.stderr
    finally:
        spy.terminate()
        spy.wait(10)
    captured = open(capture, "rb").read()
    db = sqlite3.connect(os.path.join(oidc_server.directory, "db.sqlite3"))
    refresh_tokens = [row[0] for row in db.execute("select token from oauth2_provider_refreshtoken")]
    access_tokens = [row[0] for row in db.execute("select token from oauth2_provider_accesstoken")]
    device_codes = [row[0] for row in db.execute("select device_code from oauth2_provider_devicegrant")]
    assert len(refresh_tokens) >= 4  # two logins and a refresh each
    # The capture holds what crossed: the access tokens handed out are there...
    assert sum(token.encode() in captured for token in access_tokens) >= 2
    # ...and no refresh token nor device code ever is.
    assert not [t for t in refresh_tokens if t.encode() in captured]
    assert not [c for c in device_codes if c.encode() in captured]
    assert b"code_verifier" not in captured and b"refreshToken" not in captured


def call_as(daemon, uid, gid, method, **parameters):
    """One Varlink call from another user (setpriv), as tokend sees it through SO_PEERCRED."""
    probe = ("import json,socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
             "s.sendall(sys.argv[2].encode()+b'\\0'); data=b''\n"
             "while not data.endswith(b'\\0'): data+=s.recv(65536)\n"
             "print(data[:-1].decode())")
    message = json.dumps({"method": B + method, "parameters": parameters})
    run = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/usr/bin/python3", "-c",
                          probe, daemon.socket, message], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_only_admins_log_in_and_only_the_owner_finishes(oidc_server, make_tokend, workdir):
    os.chmod(workdir, 0o755)
    daemon = make_tokend(oidc_server, daemon={"socket-mode": '"0666"'}, sessions=login_sessions(oidc_server))
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write('[access]\nadmin-users = ["4242", "4243"]\nread-groups = ["0"]\n' + text)
    daemon.start()
    reader = call_as(daemon, 4244, 0, "BeginLogin", session="dev", flow="device")
    assert reader["error"] == "org.varlink.service.PermissionDenied"
    login = call_as(daemon, 4242, 4242, "BeginLogin", session="dev", flow="device")["parameters"]["login"]
    assert login["userCode"] and login["id"].startswith("dev/")
    for method in ("FinishLogin", "CancelLogin"):
        other = call_as(daemon, 4243, 4243, method, id=login["id"])
        assert other["error"] == B + "NoSuchLogin", other
    assert call_as(daemon, 4244, 0, "CancelLogin", id=login["id"])["error"] == "org.varlink.service.PermissionDenied"
    assert "error" not in call_as(daemon, 4242, 4242, "CancelLogin", id=login["id"])
    status = daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]
    assert status["pendingLogins"] == 0


def test_ctrl_c_cancels_the_pending_login(oidc_server, make_tokend):
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    process, _, _ = start_login(daemon, "device", "dev")
    wait_for(lambda: oidc_server.grants("urn:ietf:params:oauth:grant-type:device_code"), 10, "tokend polling")
    status = daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]
    assert status["pendingLogins"] == 1
    process.send_signal(2)
    code, _, err = finish(process)
    assert code == 130 and "cancelled" in err
    wait_for(lambda: daemon.call(B + "GetStatus", session="dev")[1]["parameters"]["status"]["pendingLogins"] == 0,
             5, "the login cancelled in tokend")
    polls = len(oidc_server.grants("urn:ietf:params:oauth:grant-type:device_code"))
    time.sleep(2.5)  # the situation: more than two poll intervals (1 s) pass with no poll
    assert len(oidc_server.grants("urn:ietf:params:oauth:grant-type:device_code")) == polls, "tokend still polls"


OTHER_USER_GET = r"""
import sys, urllib.error, urllib.request
class NoFollow(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
try:
    print(urllib.request.build_opener(NoFollow).open(sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as answer:
    print(answer.code)
"""


@BROWSER
def test_browser_login_serves_only_the_user_who_began_it(oidc_server, make_tokend, browser, workdir):
    # The attack: another local user read the authorization URL from
    # xdg-open's command line and called the loopback listener itself, to
    # cancel the login or complete it with a code of its own.
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    opener = os.path.join(workdir, "bin")
    os.makedirs(opener, exist_ok=True)
    argv_file = os.path.join(workdir, "xdg-open.argv")
    with open(os.path.join(opener, "xdg-open"), "w") as f:
        f.write(f"#!/bin/sh\necho \"$@\" > {argv_file}\n")
    os.chmod(os.path.join(opener, "xdg-open"), 0o755)
    env = dict(os.environ, PATH=opener + ":" + os.environ["PATH"], DISPLAY=":99")
    process = subprocess.Popen(
        [os.path.join(BIN, "tokenctl"), "login", "--browser", "--session", "web", "--socket", daemon.socket],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    start = next(line.strip() for line in process.stdout if line.strip().startswith("http"))
    wait_for(lambda: os.path.exists(argv_file), 10, "xdg-open started")
    with open(argv_file) as f:
        opened = f.read().strip()
    assert opened == start and "state=" not in opened and "code_challenge" not in opened, opened
    base = start.split("/start/")[0]

    def as_nobody(url):
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                               OTHER_USER_GET, url], capture_output=True, text=True, timeout=30).stdout.strip()
    assert as_nobody(start) == "403", "another user cannot learn the authorization URL"
    assert as_nobody(base + "/callback?code=forged&state=forged&error=access_denied") == "403"
    assert process.poll() is None, "the login goes on"
    page = browser.authorize(authorization_url(start))
    assert "Logged in" in page and "alice" in page
    code, out, err = finish(process)
    assert code == 0 and "ignored a callback" not in err, err


SEND_AND_CLOSE = r"""
import socket, sys
host, port = sys.argv[1].split("//")[1].split("/")[0].split(":")
for _ in range(int(sys.argv[2])):
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"GET /callback?code=forged&state=forged HTTP/1.1\r\nHost: x\r\n\r\n")
"""


@BROWSER
def test_browser_login_refuses_requests_whose_sender_already_closed(oidc_server, make_tokend, browser):
    # A socket its owner has closed (FIN_WAIT2, TIME_WAIT) is listed in
    # /proc/net/tcp with uid 0: another user's request that closes at once
    # must not pass for root's.
    daemon = make_tokend(oidc_server, sessions=login_sessions(oidc_server)).start()
    process, start, _ = start_login(daemon, "browser", "web")
    sent = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                           SEND_AND_CLOSE, start, "80"], capture_output=True, text=True, timeout=120)
    assert sent.returncode == 0, sent.stderr
    assert process.poll() is None, "the login goes on"
    page = browser.authorize(authorization_url(start))
    assert "Logged in" in page and "alice" in page
    code, out, err = finish(process)
    # The listener answers in order, so every forged request was judged before root's own.
    assert code == 0, err
    assert "ignored a callback" not in err, f"{err.count('ignored a callback')} of 80 forged callbacks accepted"
