"""Security round three (issue 28), items 3, 5, 6 and 7, against the built
tokend: a hostile provider echoing secrets in other encodings (device
authorization errors too), a discovery
document redirected to another origin, an http origin replacing a Secure
cookie, and a state directory or file another user owns or may write."""
import base64
import http.server
import json
import os
import re
import subprocess
import threading
import urllib.parse
from types import SimpleNamespace

import pytest

from conftest import BIN, CLIENT_ID, CLIENT_SECRET, login, varlink_call, wait_for

B = "io.tokend.Broker."
# What the hostile provider issues: 45 characters with the ones encodings change.
ROTATED = "rt/Kq7+Zx9=Lm3/Pw8+Vn2=Hj5/Tb4+Rc6=Yd1/Gf0+Se"
SESSIONS = ("basic", "cut", "base64", "form")


class HostileProvider:
    """A token endpoint of its own: issues ROTATED for any grant, then, once
    `echo` is set, answers 400 with an error_description that repeats what it
    received in the encoding its path names; `/.well-known/*` answers with a
    redirect to `thief`, another origin that records every request."""

    def __init__(self, thief=None):
        self.echo = False
        self.thief = thief
        self.routes = {}  # GET path -> a document, or ("redirect", location)
        self.document = None
        self.received = []
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status, document, headers=()):
                payload = json.dumps(document).encode()
                self.send_response(status)
                for name, value in [("Content-Type", "application/json"), *headers]:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                provider.received.append(("GET", self.path, b""))
                route = provider.routes.get(self.path)
                if isinstance(route, tuple):
                    self.send_response(302)
                    self.send_header("Location", route[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif route is not None:
                    self.answer(200, route)
                elif provider.document:
                    self.answer(200, provider.document)
                elif provider.thief and self.path.startswith("/.well-known/"):
                    self.send_response(302)
                    self.send_header("Location", provider.thief.url + "/.well-known/openid-configuration")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.answer(404, {})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                provider.received.append(("POST", self.path, body))
                if self.path.endswith("/device"):  # device authorization: always an echo of the credentials
                    self.answer(400, {"error": "invalid_client",
                                      "error_description": "you sent Authorization: "
                                      + self.headers.get("Authorization", "") + " and " + body.decode()})
                    return
                if self.path.endswith("/device-ok"):
                    self.answer(200, {"device_code": "dc-" + os.urandom(8).hex(), "user_code": "ABCD-EFGH",
                                      "verification_uri": provider.url + "/activate", "expires_in": 60,
                                      "interval": 1})
                    return
                if not provider.echo:
                    grant = {"access_token": "at-" + os.urandom(8).hex(), "token_type": "Bearer",
                             "expires_in": 3600, "refresh_token": ROTATED}
                    if self.path.endswith("/idt"):  # an ID token to verify: tokend must fetch the JWKS
                        part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
                        grant["id_token"] = ".".join([part({"alg": "RS256", "kid": "k1"}),
                                                      part({"iss": provider.url, "sub": "u", "aud": CLIENT_ID}),
                                                      "c2ln"])
                    self.answer(200, grant)
                    return
                token = urllib.parse.parse_qs(body.decode())["refresh_token"][0]
                kind = self.path.rsplit("/", 1)[-1]
                echoed = {
                    "basic": "you sent Authorization: " + self.headers.get("Authorization", ""),
                    # Cut to 200 characters before redaction, 26 of its 45 characters stayed.
                    "cut": "x" * 174 + token + " was refused",
                    "base64": "you sent " + base64.b64encode(token.encode()).decode(),
                    "form": "you sent " + re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), body.decode()),
                }[kind]
                self.answer(400, {"error": "invalid_request", "error_description": echoed})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def thief():
    instance = HostileProvider()
    yield instance
    instance.stop()


@pytest.fixture
def provider(thief):
    instance = HostileProvider(thief)
    yield instance
    instance.stop()


def windows(text, length=12):
    return {text[i:i + length] for i in range(len(text) - length + 1)}


def encodings_of_secrets():
    """Every 12-character piece of each form tokend must never show."""
    form = urllib.parse.quote(ROTATED, safe="-._~")
    basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    assert len(CLIENT_ID) + 1 == 12  # "tokend-test:" is 16 base64 characters; the secret's start after them
    pieces = windows(ROTATED) | windows(form) | windows(form.lower()) | windows(basic[16:])
    pieces |= windows(base64.b64encode(ROTATED.encode()).decode().rstrip("="))
    return pieces | {CLIENT_SECRET}


def test_a_provider_echoing_secrets_in_any_encoding_leaks_none(provider, make_tokend, workdir):
    secret_file = os.path.join(workdir, "client-secret")
    sessions = {name: {"token-endpoint": f"{provider.url}/token/{name}", "client-id": CLIENT_ID,
                       "client-secret-file": secret_file, "client-auth": "basic"} for name in SESSIONS}
    endpoint = SimpleNamespace(token_url=provider.url + "/token/default", base=provider.url)
    daemon = make_tokend(endpoint, sessions=sessions).start()
    for name in SESSIONS:
        result = daemon.ctl("login", "--session", name, input="first-token\n")
        assert result.returncode == 0, result.stderr
    provider.echo = True
    statuses = {}
    for name in SESSIONS:
        varlink_call(daemon.socket, B + "Refresh", {"session": name})
        status = daemon.ctl("status", "--session", name, "--json")
        assert status.returncode == 0, status.stderr
        statuses[name] = status.stdout
        assert "[redacted]" in json.loads(status.stdout)["lastError"], status.stdout
    # An echo is an invalid_request, which tokend retries after a backoff (1 s, then longer) with the grant
    # kept: a slow run sees more refreshes into the echo, and each is checked. The log is read once it holds
    # the outcome of every refresh the provider has received (it logs each after the provider's answer).
    posts = [(path, body) for method, path, body in provider.received if method == "POST"]
    refreshes = len(posts) - len(SESSIONS)
    wait_for(lambda: daemon.logs().count("[Broker] refresh failed") >= refreshes, 20, "every echo's outcome logged")
    logs = daemon.logs()
    for piece in encodings_of_secrets():
        for name, text in statuses.items():
            assert piece not in text, f"{name}: a piece of a secret reached lastError: {text}"
        assert piece not in logs, f"a piece of a secret reached the log: {piece}"
    for name in SESSIONS:
        sent = [urllib.parse.parse_qs(body.decode())["refresh_token"] for path, body in posts if path == f"/token/{name}"]
        assert sent[0] == ["first-token"] and len(sent) >= 2 and all(t == [ROTATED] for t in sent[1:]), \
            f"{name} logged in, then refreshed into an echo, and again only with the rotated token: {sent}"


def test_device_authorization_errors_are_redacted(provider, make_tokend, workdir):
    """A device endpoint echoing the Basic credentials (the client secret in base64) in its error:
    no form of the secret reaches tokenctl's output, the status or the log."""
    sessions = {"dev": {"token-endpoint": f"{provider.url}/token/dev",
                        "device-authorization-endpoint": f"{provider.url}/device", "client-id": CLIENT_ID,
                        "client-secret-file": os.path.join(workdir, "client-secret"), "client-auth": "basic"}}
    endpoint = SimpleNamespace(token_url=provider.url + "/token/default", base=provider.url)
    daemon = make_tokend(endpoint, sessions=sessions).start()
    result = subprocess.run([os.path.join(BIN, "tokenctl"), "login", "--device", "--session", "dev", "--socket",
                             daemon.socket], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0, result.stdout
    assert any(path == "/device" for _, path, _ in provider.received), "the device endpoint was asked"
    status = daemon.ctl("status", "--session", "dev", "--json")
    texts = {"tokenctl login": result.stdout + result.stderr, "status": status.stdout + status.stderr,
             "log": daemon.logs()}
    assert "[redacted]" in texts["tokenctl login"], texts["tokenctl login"]
    for piece in encodings_of_secrets():
        for where, text in texts.items():
            assert piece not in text, f"a piece of a secret reached {where}: {piece!r} in {text}"


def test_discovery_follows_no_redirect_to_another_origin(provider, thief, make_tokend, workdir):
    sessions = {"disc": {"issuer": provider.url, "client-id": CLIENT_ID,
                         "client-secret-file": os.path.join(workdir, "client-secret")}}
    endpoint = SimpleNamespace(token_url=provider.url + "/token/default", base=provider.url)
    # The other origin's document names the configured issuer and sends the token endpoint to itself.
    thief.document = {"issuer": provider.url, "token_endpoint": thief.url + "/token/steal"}
    daemon = make_tokend(endpoint, sessions=sessions).start()
    wait_for(lambda: "redirected to another origin" in daemon.logs(), 10, "discovery refused")
    assert any(path.startswith("/.well-known/") for _, path, _ in provider.received), "the redirect was answered"
    result = daemon.ctl("login", "--session", "disc", input="first-token\n")
    assert "not known yet" in result.stdout, "the token is kept for when discovery succeeds"
    assert thief.received == [], "no request, document fetch or refresh token, reached the other origin"


@pytest.mark.parametrize("fetch", ["jwks", "userinfo"])
def test_jwks_and_userinfo_follow_no_redirect_to_another_origin(fetch, provider, thief, make_tokend, workdir):
    """A device login that needs the issuer's keys (an ID token) or userinfo (none): that URL answers
    302 to another origin; tokend does not follow it, and sends that origin nothing."""
    provider.routes = {
        "/.well-known/openid-configuration": {
            "issuer": provider.url, "token_endpoint": provider.url + ("/token/idt" if fetch == "jwks" else "/token/x"),
            "device_authorization_endpoint": provider.url + "/device-ok", "jwks_uri": provider.url + "/jwks",
            "userinfo_endpoint": provider.url + "/userinfo"},
        "/" + fetch: ("redirect", thief.url + "/" + fetch),
    }
    thief.document = {"keys": [], "sub": "thief"}
    sessions = {"idt": {"issuer": provider.url, "client-id": CLIENT_ID, "scope": "openid",
                        "client-secret-file": os.path.join(workdir, "client-secret")}}
    endpoint = SimpleNamespace(token_url=provider.url + "/token/default", base=provider.url)
    daemon = make_tokend(endpoint, sessions=sessions).start()
    result = subprocess.run([os.path.join(BIN, "tokenctl"), "login", "--device", "--session", "idt", "--socket",
                             daemon.socket], capture_output=True, text=True, timeout=60)
    assert any(path == "/" + fetch for _, path, _ in provider.received), (result.stdout, result.stderr)
    if fetch == "jwks":  # an ID token that cannot be verified refuses the login
        assert result.returncode != 0, result.stdout
        assert "redirected to another origin" in result.stdout + result.stderr, result.stderr
    assert thief.received == [], "the other origin got no request"


def cookies(daemon, url):
    reply = varlink_call(daemon.socket, B + "GetCookies", {"url": url})[1]
    return {c["name"]: c["value"] for c in reply["parameters"]["cookies"]}


def test_an_http_origin_cannot_replace_a_secure_cookie(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    varlink_call(daemon.socket, B + "ImportCookies",
                 {"url": "https://app.example.com/", "setCookie": ["sid=GOOD; Secure; HttpOnly"]})
    reply = varlink_call(daemon.socket, B + "ImportCookies",
                         {"url": "http://app.example.com/", "setCookie": ["sid=EVIL"]})[1]["parameters"]
    assert reply["applied"] == 0 and "Secure" in reply["rejected"][0], reply
    assert cookies(daemon, "https://app.example.com/") == {"sid": "GOOD"}
    # Nor by first pushing it out of the jar with 50 cookies of its own (the per-domain limit).
    flood = [f"f{i}=x" for i in range(50)] + ["sid=EVIL"]
    reply = varlink_call(daemon.socket, B + "ImportCookies",
                         {"url": "http://app.example.com/", "setCookie": flood})[1]["parameters"]
    assert reply["applied"] == 50 and "Secure" in reply["rejected"][0], reply
    assert cookies(daemon, "https://app.example.com/")["sid"] == "GOOD"
    # http to a loopback literal stays a secure origin: it replaces its own Secure cookie.
    loopback = "http://127.0.0.1:9/"
    varlink_call(daemon.socket, B + "ImportCookies", {"url": loopback, "setCookie": ["lb=1; Secure"]})
    reply = varlink_call(daemon.socket, B + "ImportCookies", {"url": loopback, "setCookie": ["lb=2"]})[1]
    assert reply["parameters"]["applied"] == 1 and cookies(daemon, loopback)["lb"] == "2"


def run_tokend(daemon):
    return subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True,
                          text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the directory to another user needs root")
def test_a_state_directory_owned_by_another_user_is_refused(server, make_tokend):
    daemon = make_tokend(server)
    os.mkdir(daemon.state, 0o700)
    os.chown(daemon.state, 65534, 65534)
    result = run_tokend(daemon)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert daemon.state in output and f"chown root: {daemon.state}" in output, output
    assert os.stat(daemon.state).st_uid == 65534 and os.stat(daemon.state).st_mode & 0o777 == 0o700


def test_a_state_directory_under_a_world_writable_parent_is_refused(server, make_tokend, workdir):
    """Another user could rename the state directory away and put their own in its place."""
    daemon = make_tokend(server)
    parent = os.path.join(workdir, "shared")
    os.mkdir(parent)
    os.chmod(parent, 0o777)
    state = os.path.join(parent, "state")
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace(f'state-directory = "{daemon.state}"', f'state-directory = "{state}"'))
    result = run_tokend(daemon)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert parent in output and f"chmod go-w {parent}" in output, output
    assert not os.path.exists(state)
    os.chmod(parent, 0o1777)  # sticky, as /tmp: others cannot rename what is not theirs
    daemon.state = state
    daemon.start()


def test_a_group_writable_state_file_is_refused(server, make_tokend):
    daemon = make_tokend(server)
    os.mkdir(daemon.state, 0o700)
    path = os.path.join(daemon.state, "default.session")
    with open(path, "w") as f:
        f.write("{}")
    os.chmod(path, 0o660)
    result = run_tokend(daemon)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"chmod 0600 {path}" in output, output
