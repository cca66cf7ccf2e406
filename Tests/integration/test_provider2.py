"""tokend against a provider no one here wrote: Glewlwyd, Debian's C OAuth 2 /
OpenID Connect server (Tests/integration/provider2.py), with one-use refresh
tokens, no grace period, a replay disabling the chain, PKCE required and
exact-match redirect URIs. Discovery at an issuer with a path, device and
browser login, 100-caller stampedes, restart and kill -9, revocation by the
user at the provider."""
import json
import os
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

import provider2
from conftest import BIN, Tokend, wait_for
from provider2 import CLIENT_ID, CLIENT_SECRET, PUBLIC_CLIENT_ID, SCOPE, Glewlwyd, code_grant
from test_login import authorization_url

B = "io.tokend.Broker."


class Tokend2(Tokend):
    """The built tokend with one session, "g2", configured from the provider's issuer alone."""

    def __init__(self, directory, provider, public=False, **session):
        self.directory = directory
        self.socket = os.path.join(directory, "sock")
        self.state = os.path.join(directory, "state")
        self.log_path = os.path.join(directory, "tokend.log")
        secret = os.path.join(directory, "g2-secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(CLIENT_SECRET + "\n")
        keys = {"issuer": provider.issuer, "scope": SCOPE, "refresh-margin": 5, "min-valid": 3}
        if public:
            keys.update({"client-id": PUBLIC_CLIENT_ID, "client-auth": "none"})
        else:
            keys.update({"client-id": CLIENT_ID, "client-auth": "basic"})
        keys.update(session)
        if keys["client-auth"] in ("basic", "post"):
            keys["client-secret-file"] = secret
        lines = ["[daemon]", f'socket = "{self.socket}"', f'state-directory = "{self.state}"', 'log-level = "debug"',
                 "[sessions.g2]"] + [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        self.config = os.path.join(directory, "tokend.toml")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.process = None

    def status(self):
        return self.call(B + "GetStatus", session="g2")[1]["parameters"]["status"]

    def token(self):
        reply = self.call(B + "GetToken", session="g2")[1]
        assert "error" not in reply, reply
        return reply["parameters"]["token"]

    def refresh(self, stale):
        return self.call(B + "Refresh", session="g2", staleGeneration=stale)[1]


@pytest.fixture
def provider(workdir):
    instance = Glewlwyd(os.path.join(workdir, "g2"))
    yield instance
    instance.stop()


@pytest.fixture
def make_tokend2(workdir):
    started = []

    def make(provider, **session):
        daemon = Tokend2(workdir, provider, **session)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.stop(signal.SIGKILL)


def logged_in(make_tokend2, provider):
    """A started tokend whose session holds a grant the user gave the app (code + PKCE)."""
    daemon = make_tokend2(provider).start()
    grant = code_grant(provider)
    result = daemon.ctl("login", "--session", "g2", input=grant["refresh_token"] + "\n")
    assert result.returncode == 0, result.stderr
    return daemon


def start_login(daemon, flow):
    process = subprocess.Popen(
        [os.path.join(BIN, "tokenctl"), "login", f"--{flow}", "--session", "g2", "--socket", daemon.socket],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    while True:
        line = process.stdout.readline()
        assert line, f"tokenctl ended early: {''.join(printed)} {process.stderr.read()}"
        printed.append(line)
        if flow == "device" and line.startswith("Or open "):
            return process, line.split()[-1]
        if flow == "browser" and line.strip().startswith("http"):
            return process, line.strip()


def test_discovery_at_an_issuer_with_a_path_and_device_login(provider, make_tokend2):
    daemon = make_tokend2(provider).start()
    process, url = start_login(daemon, "device")
    assert url.startswith(provider.issuer + "/device?code="), url
    provider.approve_device(urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["code"][0])
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err)
    status = daemon.status()
    assert status["state"] == "active" and status["email"] == provider2.EMAIL, status
    assert daemon.token()["generation"] == 1
    assert daemon.refresh(1)["parameters"]["token"]["generation"] == 2
    assert provider.refresh_grants() == 1


def test_device_login_public_client(provider, make_tokend2):
    daemon = make_tokend2(provider, public=True).start()
    process, url = start_login(daemon, "device")
    provider.approve_device(urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["code"][0])
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err)
    assert daemon.refresh(1)["parameters"]["token"]["generation"] == 2




def test_browser_login_with_the_redirect_uri_registered(provider, make_tokend2):
    """Glewlwyd matches redirect URIs exactly (no any-port loopback rule, RFC 8252
    §7.3), and tokenctl picks its port at random: the administrator registers the
    URI tokenctl printed, then the user logs in. (A session's fixed
    `redirect-uri` is registered once instead: tokenctl listens there.)"""
    daemon = make_tokend2(provider).start()
    process, start = start_login(daemon, "browser")
    url = authorization_url(start)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert url.startswith(provider.issuer + "/auth?") and query["code_challenge_method"] == ["S256"]
    redirect = query["redirect_uri"][0]
    unregistered = provider.user().request("GET", url + "&g_continue")
    assert unregistered.status == 403, "Glewlwyd refuses a loopback redirect URI it does not know"
    provider.add_redirect_uri(CLIENT_ID, redirect)
    callback = provider.authorize(url)
    assert callback.startswith(redirect + "?") and "iss=" in callback  # RFC 9207's iss is sent
    with urllib.request.urlopen(callback, timeout=10) as page:
        assert "Logged in" in page.read().decode()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err)
    assert daemon.token()["generation"] == 1 and daemon.status()["email"] == provider2.EMAIL


def test_stampedes_cause_one_refresh_each(provider, make_tokend2):
    daemon = logged_in(make_tokend2, provider)
    generation = daemon.token()["generation"]
    before = provider.refresh_grants()  # a login from a refresh token is itself one refresh
    for n in range(1, 4):
        replies = []

        def ask():
            replies.append(daemon.refresh(generation))

        threads = [threading.Thread(target=ask) for _ in range(100)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        generations = {r["parameters"]["token"]["generation"] for r in replies if "parameters" in r and "token" in r["parameters"]}
        assert len(replies) == 100 and generations == {generation + 1}, replies[:3]
        assert provider.refresh_grants() == before + n
        generation += 1
    assert daemon.status()["state"] == "active"


def test_restart_and_kill_keep_the_newest_refresh_token(provider, make_tokend2):
    daemon = logged_in(make_tokend2, provider)
    before = provider.refresh_grants()
    assert daemon.refresh(1)["parameters"]["token"]["generation"] == 2
    assert daemon.stop() == 0
    daemon.start()
    assert daemon.refresh(2)["parameters"]["token"]["generation"] == 3
    daemon.stop(signal.SIGKILL)
    daemon.start()
    assert daemon.refresh(3)["parameters"]["token"]["generation"] == 4
    # Each refresh presented the newest token: one use each, no replay, the chain intact.
    assert provider.refresh_grants() == before + 3 and daemon.status()["state"] == "active"
    enabled = [t for t in provider.refresh_tokens() if t["enabled"]]
    assert len(enabled) == 1, enabled


def test_the_provider_refuses_a_revoked_refresh_token_without_a_body(provider):
    """What Glewlwyd answers for a refresh token the user revoked, and for a replay:
    HTTP 400 with an empty body, no `invalid_grant` (issue 29)."""
    first = code_grant(provider)
    second = provider.token_request(grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert second.status == 200
    replay = provider.token_request(grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert (replay.status, replay.body) == (400, b"")
    newest = provider.token_request(grant_type="refresh_token", refresh_token=second.json()["refresh_token"])
    assert (newest.status, newest.body) == (400, b""), "a replay disables the newest token of the chain"
    third = code_grant(provider)
    assert provider.revoke_all() >= 1
    revoked = provider.token_request(grant_type="refresh_token", refresh_token=third["refresh_token"])
    assert (revoked.status, revoked.body) == (400, b"")


def test_revocation_at_the_provider_requires_login(provider, make_tokend2):
    daemon = logged_in(make_tokend2, provider)
    generation = daemon.token()["generation"]
    assert provider.revoke_all() == 1
    reply = daemon.refresh(generation)
    # Never the generation the caller said was rejected.
    assert reply.get("error") in (B + "LoginRequired", B + "UpstreamUnavailable"), reply
    # One confirming retry after the first backoff step (1 s), then loginRequired.
    wait_for(lambda: daemon.status()["state"] == "loginRequired", 8, "loginRequired")
    assert daemon.refresh(generation)["error"] == B + "LoginRequired"


@pytest.fixture
def key_provider(workdir):
    instance = Glewlwyd(os.path.join(workdir, "g2"), keys=True)
    yield instance
    instance.stop()


def test_the_provider_accepts_private_key_jwt(key_provider):
    """Glewlwyd, configured for it, authenticates a client by an ES256 assertion
    (RFC 7523) at every grant; the secret-less client tokend will need."""
    grant = code_grant(key_provider, provider2.KEY_CLIENT_ID)
    fields = provider2.client_fields(key_provider, provider2.KEY_CLIENT_ID)
    refreshed = key_provider.token_request(grant_type="refresh_token", refresh_token=grant["refresh_token"], **fields)
    assert refreshed.status == 200, refreshed.body
    unsigned = key_provider.token_request(client_id=provider2.KEY_CLIENT_ID, secret=None, grant_type="refresh_token",
                                          refresh_token=refreshed.json()["refresh_token"])
    assert unsigned.status in (400, 401), "no assertion, no token"


def test_private_key_jwt_session(key_provider, make_tokend2):
    """Every request to Glewlwyd authenticated by an ES256 assertion tokend
    signs (RFC 7523): refresh and revocation, each with its own endpoint as
    audience, which Glewlwyd insists on."""
    daemon = make_tokend2(key_provider, **{"client-id": provider2.KEY_CLIENT_ID, "client-auth": "private-key-jwt",
                                           "client-key-file": key_provider.client_key_path})
    daemon.start()
    grant = code_grant(key_provider, provider2.KEY_CLIENT_ID)
    result = daemon.ctl("login", "--session", "g2", input=grant["refresh_token"] + "\n")
    assert result.returncode == 0, result.stderr
    assert daemon.refresh(1)["parameters"]["token"]["generation"] == 2
    assert key_provider.refresh_grants() == 2  # the login from a refresh token is one refresh, this the second
    result = daemon.ctl("logout", "--session", "g2")
    assert result.returncode == 0, result.stderr
    assert not [t for t in key_provider.refresh_tokens() if t["enabled"]], "revoked with an assertion"
