"""A refusal is a refusal, however the provider words it: the real authorization
server's refusal of a revoked grant, as it sends it (invalid_grant) and rewritten
by the fault proxy to a bare status with the body another provider would send
(empty, or an HTML page), ends in loginRequired after one confirming retry;
a single refusal that the next attempt does not repeat changes nothing; a
refused client (invalid_client) keeps the grant. A
caller that names its refused generation never gets that generation back."""
import json
import os
import sqlite3
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from conftest import login, varlink_call, wait_for
from faultproxy import FaultProxy

B = "io.tokend.Broker."


@pytest.fixture
def proxy(server):
    instance = FaultProxy(server.base)
    original = instance.server.RequestHandlerClass

    class Rewriting(original):
        def fault_bare_refusal(self, body, _):
            """Forwards; a 400 or 401 goes back as its status with an empty body (Glewlwyd's wording)."""
            request = urllib.request.Request(instance.upstream + self.path, data=body, method="POST")
            for name in ("Authorization", "Content-Type"):
                if self.headers.get(name):
                    request.add_header(name, self.headers[name])
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    self.send(response.status, response.read(), [("Content-Type", "application/json")])
            except urllib.error.HTTPError as error:
                error.read()
                self.send(error.code, b"" if error.code in (400, 401) else b"{}")

        def fault_invalid_client(self, *_):
            """What a provider says to a wrong secret, key or key id, or an assertion from a clock that is off."""
            self.send(401, json.dumps({"error": "invalid_client", "error_description": "client assertion expired"})
                      .encode(), [("Content-Type", "application/json")])

    instance.server.RequestHandlerClass = Rewriting
    yield instance
    instance.stop()


def revoke_grant(server):
    """The user revokes tokend's grant at the provider: every refresh token it issued."""
    db = sqlite3.connect(os.path.join(server.directory, "db.sqlite3"))
    tokens = [row[0] for row in db.execute("select token from oauth2_provider_refreshtoken")]
    for token in tokens:
        status, _ = server.post("/o/revoke_token/", token=token, token_type_hint="refresh_token")
        assert status == 200, status


def status_json(daemon):
    result = daemon.ctl("status", "--json")
    return json.loads(result.stdout)


def token(daemon):
    reply = varlink_call(daemon.socket, B + "GetToken")[1]
    assert "error" not in reply, reply
    return reply["parameters"]["token"]


def refresh(daemon, stale):
    return varlink_call(daemon.socket, B + "Refresh", {"staleGeneration": stale})[1]


def behind_proxy(make_tokend, server, proxy):
    endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
    daemon = make_tokend(endpoint).start()
    login(daemon, server)
    return daemon


def test_revocation_at_the_provider_requires_login(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    generation = token(daemon)["generation"]
    revoke_grant(server)
    reply = refresh(daemon, generation)
    # invalid_grant is unambiguous: no confirming retry.
    assert reply.get("error") == B + "LoginRequired", reply
    status = status_json(daemon)
    assert status["state"] == "loginRequired" and "invalid_grant" in status["lastError"], status


@pytest.mark.parametrize("wording, said", [("bare-refusal", "400"), ("401", "401")])
def test_a_refusal_without_an_error_code_is_confirmed_once_then_requires_login(
        server, proxy, make_tokend, wording, said):
    daemon = behind_proxy(make_tokend, server, proxy)
    generation = token(daemon)["generation"]
    revoke_grant(server)
    proxy.mode = wording
    first = len(proxy.calls())
    reply = refresh(daemon, generation)
    # Never the generation the caller said was refused.
    assert reply.get("error") == B + "UpstreamUnavailable", reply
    assert reply["parameters"]["retryAfter"] >= 1
    wait_for(lambda: status_json(daemon)["state"] == "loginRequired", 8, "loginRequired after one confirmation")
    assert len(proxy.calls()) - first == 2, "one refusal, one confirming retry"
    status = status_json(daemon)
    assert f"HTTP {said}" in status["lastError"], status
    assert refresh(daemon, generation).get("error") == B + "LoginRequired"


def test_a_refusal_the_next_attempt_does_not_repeat_changes_nothing(server, proxy, make_tokend):
    daemon = behind_proxy(make_tokend, server, proxy)
    generation = token(daemon)["generation"]
    proxy.mode = "400"
    assert refresh(daemon, generation).get("error") == B + "UpstreamUnavailable"
    proxy.mode = "pass"  # a flapping middlebox: the confirming retry reaches the provider
    wait_for(lambda: status_json(daemon)["generation"] == generation + 1, 8, "the confirming retry succeeds")
    assert status_json(daemon)["state"] == "active"
    assert refresh(daemon, generation)["parameters"]["token"]["generation"] == generation + 1


def test_a_refused_client_keeps_the_grant(server, proxy, make_tokend):
    daemon = behind_proxy(make_tokend, server, proxy)
    current = token(daemon)
    proxy.mode = "invalid-client"
    reply = refresh(daemon, current["generation"])
    assert reply.get("error") == B + "UpstreamUnavailable", reply
    assert reply["parameters"]["retryAfter"] >= 500, reply
    status = status_json(daemon)
    assert status["state"] == "backingOff", status
    assert "invalid_client" in status["lastError"] and "client-secret-file" in status["lastError"], status
    # No confirming retry turns it into a logout, and the still-valid token is still served.
    first = len(proxy.calls())
    time.sleep(3)
    assert len(proxy.calls()) == first
    assert status_json(daemon)["state"] == "backingOff"
    assert token(daemon)["generation"] == current["generation"]
