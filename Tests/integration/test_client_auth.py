"""How tokend authenticates its client to the provider, against the real
django-oauth-toolkit server: client_secret_basic with a secret full of the
characters RFC 6749 §2.3.1's form-encoding exists for; discovery of an issuer
with a path published only the RFC 8414 way. (private_key_jwt runs against
Glewlwyd, in test_provider2.py.)"""
import base64
import http.server
import json
import os
import socket
import sqlite3
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

import provider2
from conftest import BIN, CLIENT_ID, free_port
from test_provider2 import authorization_url, make_tokend2  # noqa: F401 (a fixture)

B = "io.tokend.Broker."
# ':' splits Basic credentials, '%' and '+' are decoded by the server, ' ', '&' and '='
# separate form fields; non-ASCII is percent-encoded UTF-8.
RESERVED_SECRET = "s:e%41c+r e&t=é✓/?#~"


def set_client_secret(server, secret):
    """The administrator changes the client's secret at the provider (stored unhashed here)."""
    with sqlite3.connect(os.path.join(server.directory, "db.sqlite3"), timeout=30) as db:
        changed = db.execute("update oauth2_provider_application set client_secret = ? where client_id = ?",
                             (secret, CLIENT_ID)).rowcount
    assert changed == 1


def basic_status(server, header, refresh_token):
    request = urllib.request.Request(server.token_url, headers={"Authorization": header}, data=urllib.parse.urlencode(
        {"grant_type": "refresh_token", "refresh_token": refresh_token}).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_provider_needs_the_encoding(server):
    """Without RFC 6749 §2.3.1's form-encoding this secret does not authenticate:
    the server decodes '%41' and '+' (and splits at the first ':')."""
    status, grant = server.password_grant()
    assert status == 200, grant
    set_client_secret(server, RESERVED_SECRET)
    raw = "Basic " + base64.b64encode(f"{CLIENT_ID}:{RESERVED_SECRET}".encode()).decode()
    assert basic_status(server, raw, grant["refresh_token"]) == 401


def test_client_secret_basic_with_reserved_characters(server, make_tokend):
    status, grant = server.password_grant()
    assert status == 200, grant
    set_client_secret(server, RESERVED_SECRET)
    daemon = make_tokend(server, **{"client-auth": '"basic"'})
    with open(os.path.join(daemon.directory, "client-secret"), "w") as f:
        f.write(RESERVED_SECRET + "\n")
    daemon.start()
    result = daemon.ctl("login", input=grant["refresh_token"] + "\n")
    assert result.returncode == 0, result.stderr
    before = len(server.grants("refresh_token"))
    reply = daemon.call(B + "Refresh")[1]
    assert "error" not in reply, reply
    refreshed = server.grants("refresh_token")[before:]
    assert [g["status"] for g in refreshed] == [200], refreshed
    assert RESERVED_SECRET not in daemon.logs()


class MetadataServer:
    """An authorization server's metadata at an issuer with a path, published
    only the RFC 8414 way (`/.well-known/oauth-authorization-server/PATH`),
    naming the real server's endpoints. Records the paths asked for."""

    def __init__(self, token_url):
        self.paths = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                if self.path != "/.well-known/oauth-authorization-server/tenant/x":
                    self.send_error(404)
                    return
                body = json.dumps({"issuer": outer.issuer, "token_endpoint": token_url}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}/tenant/x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_discovery_of_an_issuer_with_a_path_the_rfc_8414_way(server, make_tokend, workdir):
    """OpenID Connect's {issuer}/.well-known/openid-configuration is tried
    first; RFC 8414 puts the well-known segment before the issuer's path."""
    metadata = MetadataServer(server.token_url)
    try:
        secret = os.path.join(workdir, "client-secret")  # the one Tokend writes for its default session
        daemon = make_tokend(server, sessions={"t": {"issuer": metadata.issuer, "client-id": CLIENT_ID,
                                                     "client-secret-file": secret}}).start()
        status, grant = server.password_grant()
        assert status == 200, grant
        result = daemon.ctl("login", "--session", "t", input=grant["refresh_token"] + "\n")
        assert result.returncode == 0, result.stderr
        before = len(server.grants("refresh_token"))
        reply = daemon.call(B + "Refresh", session="t")[1]
        assert "error" not in reply, reply
        assert [g["status"] for g in server.grants("refresh_token")[before:]] == [200]
        assert metadata.paths[:2] == ["/tenant/x/.well-known/openid-configuration",
                                      "/.well-known/oauth-authorization-server/tenant/x"], metadata.paths
    finally:
        metadata.stop()


@pytest.fixture
def glewlwyd(workdir):
    instance = provider2.Glewlwyd(os.path.join(workdir, "g2"))
    yield instance
    instance.stop()


def start_browser_login(daemon, *options):
    """tokenctl login --browser for session g2 in the background; returns it and the start URL it printed."""
    process = subprocess.Popen(
        [os.path.join(BIN, "tokenctl"), "login", "--browser", "--no-open", "--session", "g2", "--socket", daemon.socket,
         *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        line = process.stdout.readline()
        assert line, f"tokenctl ended early: {process.stderr.read()}"
        if line.strip().startswith("http"):
            return process, line.strip()


def test_pushed_authorization_request(glewlwyd, make_tokend2):
    """With pushed-authorization = true the authorization request goes to the
    provider's PAR endpoint, client-authenticated (RFC 9126), and the browser
    is sent with only client_id and request_uri."""
    # Glewlwyd checks the redirect URI when the request is pushed: register it first.
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    glewlwyd.add_redirect_uri(provider2.CLIENT_ID, redirect)
    daemon = make_tokend2(glewlwyd, **{"pushed-authorization": True, "redirect-uri": redirect}).start()
    process, start = start_browser_login(daemon, "--redirect-uri", redirect)
    url = authorization_url(start)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert sorted(query) == ["client_id", "request_uri"], url
    assert query["request_uri"][0].startswith("urn:ietf:params:oauth:request_uri:")
    callback = glewlwyd.authorize(url)
    with urllib.request.urlopen(callback, timeout=10) as page:
        assert "Logged in" in page.read().decode()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err)
    assert daemon.token()["generation"] == 1


@pytest.mark.parametrize("family,host,shown", [(socket.AF_INET, "127.0.0.1", "127.0.0.1"),
                                               (socket.AF_INET6, "::1", "[::1]")])
def test_browser_login_at_the_registered_redirect_uri(glewlwyd, make_tokend2, family, host, shown):
    """The provider matches redirect URIs exactly: with the session's
    redirect-uri registered once, tokenctl listens there and the login needs
    no administrator afterwards. tokenctl learns the URI from the session's
    status: the user does not repeat it."""
    redirect = f"http://{shown}:{free_port(family=family, host=host)}/tokend/cb"
    glewlwyd.add_redirect_uri(provider2.CLIENT_ID, redirect)
    daemon = make_tokend2(glewlwyd, **{"redirect-uri": redirect}).start()
    assert daemon.status()["redirectUri"] == redirect
    process, start = start_browser_login(daemon)
    assert start.startswith(redirect.rsplit("/tokend/", 1)[0] + "/start/")
    url = authorization_url(start)
    assert urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["redirect_uri"] == [redirect]
    callback = glewlwyd.authorize(url)
    assert callback.startswith(redirect + "?")
    with urllib.request.urlopen(callback, timeout=10) as page:
        assert "Logged in" in page.read().decode()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err)
    assert daemon.token()["generation"] == 1


@pytest.mark.parametrize("family,host,shown", [(socket.AF_INET, "127.0.0.1", "127.0.0.1"),
                                               (socket.AF_INET6, "::1", "[::1]")])
def test_a_redirect_uri_whose_port_is_taken_is_a_clear_error(server, make_tokend, family, host, shown):
    daemon = make_tokend(server).start()
    with socket.socket(family) as taken:
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        redirect = f"http://{shown}:{port}/callback"
        result = daemon.ctl("login", "--browser", "--no-open", "--redirect-uri", redirect)
    assert result.returncode != 0
    assert f"port {port} of {shown} is in use" in result.stderr and redirect in result.stderr, result.stderr


def test_check_config_refuses_what_would_stop_tokend_at_start(server, make_tokend):
    """--check-config reads the secret and key files too: a secret-jwt secret
    shorter than HS256 allows is refused by the check, not at the first request."""
    daemon = make_tokend(server, **{"client-auth": '"secret-jwt"'})  # the test secret has 18 bytes
    check = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config, "--check-config"],
                           capture_output=True, text=True, timeout=20)
    assert check.returncode == 78 and "at least 32 bytes" in check.stderr, check.stderr
    with open(os.path.join(daemon.directory, "client-secret"), "w") as f:
        f.write("x" * 32 + "\n")
    check = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config, "--check-config"],
                           capture_output=True, text=True, timeout=20)
    assert check.returncode == 0, check.stderr
