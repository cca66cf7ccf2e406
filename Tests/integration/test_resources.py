# Over 90 s of `make test` (docs/testing.md): stampedes of a thousand askers at expiry over ten resources, and
# keys refreshed over several lifetimes, each in the test server's two refresh modes (315 s summed on the busy
# 2-core machine).
"""One login, every API (issue #30): tokens per RFC 8707 resource and per
scope from one grant, against django-oauth-toolkit with rotation and reuse
protection on and no grace period, in both of the test server's refresh modes:
"narrow" (DOT as it is: a refresh naming resources narrows the refresh token)
and "keep-wide" (Entra ID: one resource per access token, the refresh token
keeps every resource). The test API is the resource servers: it accepts a
token only when the server's introspection says its audience includes the
resource.

The first tests check the test server and test API themselves (no tokend),
so that what the tokend tests rely on is measured, not assumed."""
import json
import os
import sqlite3
import time

import pytest

from conftest import wait_for
from resources import (DEVICE_GRANT, burst, code_grant, device_grant, introspect, live_families, mode_server,
                       overlapping, password_grant, refresh, refreshes, User)
from resources import modal_server, mode, resource_api  # noqa: F401 (fixtures)
from testapi import TestAPI

B = "io.tokend.Broker."
SESSION = "apis"
COUNT = 10


@pytest.fixture
def api(resource_api):
    return resource_api


def names(count=COUNT):
    return [f"api{i}" for i in range(count)]


# --- the test server and the test API -----------------------------------------------------------------------------


def test_server_modes_narrow_or_keep_the_refresh_token_wide(modal_server, mode):
    a, b, c = "https://a.test/", "https://b.test/", "https://c.test/"
    status, grant = password_grant(modal_server, [a, b, c])
    assert status == 200, grant
    status, first = refresh(modal_server, grant["refresh_token"], [a])
    assert status == 200, first
    issued = refreshes(modal_server)[-1]["issued"]
    assert issued["resource"] == [a]
    status, second = refresh(modal_server, first["refresh_token"], [b])
    if mode == "narrow":
        assert issued["refresh_resource"] == [a], "DOT narrows the new refresh token to what the refresh named"
        assert (status, second.get("error")) == (400, "invalid_target"), "B is lost after a refresh for A"
        status, wide = refresh(modal_server, first["refresh_token"])
        assert status == 200 and refreshes(modal_server)[-1]["issued"]["resource"] == [a]
    else:
        assert issued["refresh_resource"] == [a, b, c], "the refresh token keeps every resource"
        assert status == 200 and refreshes(modal_server)[-1]["issued"]["resource"] == [b]
        status, several = refresh(modal_server, second["refresh_token"], [a, b])
        assert (status, several.get("error"), several.get("error_description")) == \
            (400, "invalid_target", "one resource per token")
        status, unnamed = refresh(modal_server, second["refresh_token"])
        assert status == 200 and refreshes(modal_server)[-1]["issued"] == \
            {"resource": [a], "scope": "read", "refresh_resource": [a, b, c]}, "none named: the first resource"
    # first's refresh token is rotated now: DOT deletes the access token issued with it; Entra ID does not.
    assert introspect(modal_server, first["access_token"])["active"] is (mode == "keep-wide")
    # A refusal does not consume the refresh token; no refresh here was a reuse.
    assert not any(e["reuse"] or e["family_revoked"] for e in refreshes(modal_server))
    assert live_families(modal_server) == 1


@pytest.mark.parametrize("flow", ["device", "code"])
def test_device_and_code_grants_carry_their_resources_to_the_refresh_token(modal_server, mode, flow):
    a, b = "https://a.test/", "https://b.test/"
    status, grant = (device_grant if flow == "device" else code_grant)(modal_server, [a, b])
    assert status == 200, grant
    issued = modal_server.grants()[-1]["issued"]
    assert issued["refresh_resource"] == [a, b]
    assert issued["resource"] == ([a, b] if mode == "narrow" else [a])


def test_grant_log_records_each_refresh_its_times_and_a_replay(modal_server):
    status, grant = password_grant(modal_server, ["https://a.test/"])
    first = refresh(modal_server, grant["refresh_token"])[1]
    assert refresh(modal_server, first["refresh_token"])[0] == 200
    replay = refresh(modal_server, first["refresh_token"])
    assert replay == (400, {"error": "invalid_grant"})
    ok, ok2, replayed = refreshes(modal_server)
    assert ok["start"] <= ok["t"] <= ok2["start"] <= ok2["t"] <= replayed["start"] and not overlapping([ok, ok2])
    assert (ok["reuse"], ok["family_revoked"], ok["resource"]) == (False, False, [])
    assert (replayed["reuse"], replayed["family_revoked"]) == (True, True), "reuse protection revoked the family"
    assert live_families(modal_server) == 0


def test_api_accepts_a_token_only_where_its_audience_reaches(modal_server, api, mode):
    one, two = api.resource("one"), api.resource("two")
    status, grant = password_grant(modal_server, [one])
    assert status == 200, grant
    bearer = {"Authorization": "Bearer " + grant["access_token"]}
    import requests
    assert requests.get(one + "items", headers=bearer, timeout=10).json()["aud"] == [one]
    refused = requests.get(two + "items", headers=bearer, timeout=10)
    assert refused.status_code == 401 and "audience" in refused.headers["WWW-Authenticate"]
    assert requests.get(one + "items?scope=write", headers=bearer, timeout=10).status_code == 403
    unrestricted = password_grant(modal_server, [])[1]["access_token"]
    assert requests.get(one, headers={"Authorization": "Bearer " + unrestricted}, timeout=10).status_code == 401
    assert requests.get(api.url + "/data", headers=bearer, timeout=10).status_code == 200, "old endpoints as they were"
    assert api.checks == [(one, 200), (two, 401), (one, 403), (one, 401)]


# --- tokend ---------------------------------------------------------------------------------------------------------


def device_session(server, resources, **keys):
    """A session the test logs in with tokend's device flow (public client)."""
    return {"token-endpoint": server.token_url, "device-authorization-endpoint": server.base + "/o/device-authorization/",
            "client-id": "tokend-device", "client-auth": "none", "scope": "read write", "resources": resources,
            "refresh-margin": 0, "min-valid": 4, **keys}


def introspection(server):
    """Where tokend asks a token's audience (the test server publishes no discovery document)."""
    return {"introspection-endpoint": server.base + "/o/introspect/"}


def piped_session(server, workdir, resources, **keys):
    """A session logged in with a refresh token the test got itself (confidential client)."""
    return {"token-endpoint": server.token_url, "client-id": "tokend-test",
            "client-secret-file": os.path.join(workdir, "client-secret"), "scope": "read write",
            "resources": resources, **introspection(server), **keys}


def start(make_tokend, server, session, **daemon):
    return make_tokend(server, daemon={"max-connections": 1200, "forced-refreshes-per-minute": 600, **daemon},
                       sessions={SESSION: session}).start()


def device_login(daemon, server):
    """A device login (BeginLogin, FinishLogin), approved by alice over HTTP."""
    reply = call(daemon, "BeginLogin", flow="device")
    assert "error" not in reply, reply
    pending = reply["parameters"]["login"]
    User(server).approve_device(pending["userCode"])
    reply = daemon.call(B + "FinishLogin", id=pending["id"])[1]
    assert "error" not in reply, reply


def piped_login(daemon, server, resources, scope="read write"):
    """Login with a refresh token from a password grant that carried `resources`."""
    status, grant = password_grant(server, resources, scope)
    assert status == 200, grant
    reply = call(daemon, "Login", refreshToken=grant["refresh_token"])
    assert "error" not in reply, reply


def call(daemon, method, **parameters):
    return daemon.call(B + method, session=SESSION, **parameters)[1]


def token(daemon, **parameters):
    reply = call(daemon, "GetToken", **parameters)
    assert "error" not in reply, (parameters, reply)
    return reply["parameters"]["token"]


def accepted(api, name, access_token):
    status, document, _ = api.check(name, access_token, None)
    return status == 200, document


def status_of(daemon):
    return call(daemon, "GetStatus")["parameters"]["status"]


def expected_strategy(mode):
    return "shared-audience" if mode == "narrow" else "per-resource"


def upstream_per_expiry(mode, keys):
    """Refreshes one expiry of `keys` keys costs: under shared-audience the session's one token (its audience
    every resource) answers every key, so one; per resource, one per key."""
    return 1 if mode == "narrow" else keys


# The thousand askers' window: access tokens live 30 s and GetToken wants 15 s of life (min-valid, at most half
# a token's lifetime), so a key needs a refresh 15 s before it expires. With refresh-margin 0 each token is refreshed
# by its own schedule at its expiry (the session's own too, asked for or not), so the burst must come after the last
# key enters its window and before the first expires: the keys, filled one at a time, must expire within 15 s.
LIFETIME = 30
WINDOW = LIFETIME // 2


def test_ten_resources_a_thousand_askers_at_expiry_one_refresh_per_token_one_at_a_time(workdir, make_tokend, mode):
    server = mode_server(os.path.join(workdir, "as"), mode, access_ttl=LIFETIME)
    api = TestAPI(introspection=server.base + "/o/introspect/")
    try:
        resources = [api.resource(n) for n in names()]
        daemon = start(make_tokend, server, device_session(server, resources, **{"min-valid": WINDOW}))
        device_login(daemon, server)
        login_grant = server.grants(DEVICE_GRANT)[-1]
        assert login_grant["status"] == 200 and login_grant["issued"]["refresh_resource"] == resources, \
            "the device login asked for all 10 resources"
        # One token per resource; the first decides the strategy.
        filled = {r: token(daemon, resource=r) for r in resources}
        assert all(filled[r]["resource"] == r for r in resources)
        status = status_of(daemon)
        assert status["strategy"] == expected_strategy(mode), status
        # Every key inside its min-valid window, none expired yet (see WINDOW): all need a refresh, none had its own.
        expiries = [t["expiresAt"] for t in filled.values()]
        first_expiry, last_expiry = min(expiries), max(expiries)
        assert last_expiry - first_expiry < WINDOW - 2, f"filling the keys took {last_expiry - first_expiry} s"
        wait_for(lambda: time.time() >= last_expiry - WINDOW + 1, 60, "every key's token inside its min-valid window")
        session = status_of(daemon)
        held = {t["resource"]: t["generation"] for t in session["tokens"] if t.get("resource")}
        assert all(held.get(r, filled[r]["generation"]) == filled[r]["generation"] for r in resources), \
            f"a key was refreshed before the burst: {held}"
        before = len(refreshes(server))
        calls = [{"method": B + "GetToken", "parameters": {"session": SESSION, "resource": r}}
                 for _ in range(100) for r in resources]
        replies = burst(daemon.socket, calls)
        during = refreshes(server, before)
        assert not [r for r in replies if "error" in r], [r for r in replies if "error" in r][:2]
        # Under per-resource the session's own token is refreshed naming no resource, by its schedule at its expiry
        # (it expires with the first key, inside the burst when the burst is slow); no asker asks for it.
        own = [e for e in during if not e["resource"]]
        assert len(own) <= 1 and all(e["start"] >= session["nextRefreshAt"] for e in own), \
            f"the session's own token refreshed {len(own)} time(s), planned at {session['nextRefreshAt']}: {own}"
        keyed = [e for e in during if e["resource"]]
        assert len(keyed) == upstream_per_expiry(mode, COUNT), \
            f"{len(keyed)} upstream refreshes for {COUNT} keys: {[e['resource'] for e in during]}"
        assert all(e["status"] == 200 for e in during), [(e["status"], e["error"]) for e in during]
        for name, r in zip(names(), resources):
            answers = {json.dumps(x["parameters"]["token"], sort_keys=True) for x in replies
                       if x["parameters"]["token"]["resource"] == r}
            assert len(answers) == 1, f"{r}: the 100 askers got {len(answers)} different tokens"
            assert json.loads(answers.pop())["generation"] > filled[r]["generation"]
        # Then every resource yields a token its API accepts (a provider may have revoked the access
        # tokens of rotated refresh tokens: DOT does), and still refreshes (the refresh token kept them all).
        for name, r in zip(names(), resources):
            answer = accepted(api, name, token(daemon, resource=r)["accessToken"])
            assert answer[0], f"after the burst, GetToken({r}) yields a token its API refuses: {answer[1]}"
        for name, r in zip(names(), resources):
            current = token(daemon, resource=r)
            reply = call(daemon, "Refresh", resource=r, staleGeneration=current["generation"])
            assert "error" not in reply, (r, reply)
            answer = accepted(api, name, reply["parameters"]["token"]["accessToken"])
            assert answer[0], f"Refresh({r}) yields a token its API refuses: {answer[1]}"
        for name, r in zip(names(), resources):
            answer = accepted(api, name, token(daemon, resource=r)["accessToken"])
            assert answer[0], f"after a refresh of every key, GetToken({r}) yields a token its API refuses: {answer[1]}"
        every = refreshes(server)
        assert not overlapping(every), f"two refreshes in flight at once: {overlapping(every)[:1]}"
        assert not any(e["reuse"] or e["family_revoked"] for e in every)
        assert live_families(server) == 1, "the token family is alive"
        print(f"{mode}: {len(calls)} askers of {COUNT} resources at expiry -> {len(during)} upstream refresh(es); "
              f"{len(every)} refreshes in the test, none overlapping; strategy {status['strategy']}")
    finally:
        api.stop()
        server.stop()


def test_keys_are_refreshed_before_they_expire_one_at_a_time(workdir, make_tokend, mode):
    server = mode_server(os.path.join(workdir, "as"), mode, access_ttl=12)
    try:
        resources = [f"https://api{i}.test/" for i in range(5)]
        daemon = start(make_tokend, server, piped_session(server, workdir, resources, **{"refresh-margin": 5}))
        piped_login(daemon, server, resources)
        filled = {r: token(daemon, resource=r) for r in resources}
        before = len(refreshes(server))

        def refreshed():
            status = status_of(daemon)
            if mode == "narrow":  # shared-audience: the session's own token answers every key
                return status if status["generation"] > filled[resources[0]]["generation"] else None
            held = {t["resource"]: t for t in status["tokens"] if t.get("resource")}
            return status if all(held[r]["generation"] > filled[r]["generation"] for r in resources) else None

        wait_for(refreshed, 20, "every key refreshed without anyone asking")
        proactive = refreshes(server, before)
        assert len(proactive) >= upstream_per_expiry(mode, len(resources)), proactive
        assert all(e["status"] == 200 for e in proactive), proactive
        assert not overlapping(proactive), "proactive refreshes run one at a time"
        for r in resources:
            held = token(daemon, resource=r)
            # Issued (expiresAt less the 12 s lifetime) before the old token expired.
            assert filled[r]["expiresAt"] < held["expiresAt"] and held["expiresAt"] - 12 < filled[r]["expiresAt"], \
                (r, held, filled[r])
        assert len(refreshes(server, before)) == len(proactive), "the keys' new tokens were there when asked for"
        assert not any(e["reuse"] or e["family_revoked"] for e in refreshes(server))
    finally:
        server.stop()


def test_a_resource_outside_the_list_is_refused_without_an_upstream_call(modal_server, api, make_tokend, workdir):
    resources = [api.resource(n) for n in names(2)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    before = len(modal_server.grants())
    reply = call(daemon, "GetToken", resource=api.resource("other"))
    assert reply["error"] == B + "ResourceNotAllowed", reply
    assert reply["parameters"]["resource"] == api.resource("other") and reply["parameters"]["reason"]
    reply = call(daemon, "GetToken", resource="not a uri")
    assert reply["error"] in (B + "ResourceNotAllowed", "org.varlink.service.InvalidParameter"), reply
    assert len(modal_server.grants()) == before, "no upstream call"


def test_a_scope_beyond_the_sessions_is_refused_and_a_narrower_one_served(modal_server, api, make_tokend, workdir):
    resources = [api.resource(n) for n in names(2)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    before = len(modal_server.grants())
    for scope in ("admin", "read email", "read write admin"):
        reply = call(daemon, "GetToken", resource=resources[0], scope=scope)
        assert reply["error"] == B + "ScopeNotAllowed", reply
        assert set(reply["parameters"]["scope"].split()) == set(scope.split()) and reply["parameters"]["reason"], reply
    assert len(modal_server.grants()) == before, "no upstream call"
    narrow = token(daemon, resource=resources[0], scope="read")
    assert narrow["scope"] and set(narrow["scope"].split()) >= {"read"} and narrow["resource"] == resources[0]
    assert accepted(api, "api0", narrow["accessToken"])[0]
    # The narrower key took nothing from the session: write is still to be had, for both resources.
    for name, r in zip(names(2), resources):
        wide = call(daemon, "Refresh", resource=r, scope="read write")
        assert "error" not in wide, wide
        status, document, _ = api.check(name, wide["parameters"]["token"]["accessToken"], "read write")
        assert status == 200, document


def test_invalid_target_fails_that_resource_only(modal_server, api, make_tokend, workdir, mode):
    # The grant covers api0 and api1; the session also lists api2, which the provider refuses (invalid_target).
    resources = [api.resource(n) for n in names(3)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources[:2])
    reply = call(daemon, "GetToken", resource=resources[2])
    assert reply["error"] == B + "TargetRefused", reply
    assert reply["parameters"]["resource"] == resources[2] and "invalid_target" in reply["parameters"]["reason"]
    assert any(e["error"] == "invalid_target" for e in refreshes(modal_server))
    for round_ in range(2):
        for name, r in zip(names(2), resources[:2]):
            current = token(daemon, resource=r)
            assert accepted(api, name, current["accessToken"])[0], (round_, r, accepted(api, name, current["accessToken"]))
            reply = call(daemon, "Refresh", resource=r, staleGeneration=current["generation"])
            assert "error" not in reply, (round_, r, reply)
            assert accepted(api, name, reply["parameters"]["token"]["accessToken"])[0]
    reply = call(daemon, "GetToken", resource=resources[2])
    assert reply["error"] == B + "TargetRefused", reply
    status = status_of(daemon)
    assert status["state"] == "active", status
    refused = [t for t in status["tokens"] if t.get("resource") == resources[2]]
    assert refused and refused[0]["lastError"], status["tokens"]
    assert not any(e["reuse"] or e["family_revoked"] for e in refreshes(modal_server))


def test_invalid_grant_still_ends_the_session(modal_server, api, make_tokend, workdir):
    resources = [api.resource(n) for n in names(3)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    tokens = {r: token(daemon, resource=r) for r in resources}
    with sqlite3.connect(os.path.join(modal_server.directory, "db.sqlite3")) as db:
        db.execute("update oauth2_provider_refreshtoken set revoked = datetime('now') where revoked is null")
    reply = call(daemon, "Refresh", resource=resources[0], staleGeneration=tokens[resources[0]]["generation"])
    assert reply["error"] == B + "LoginRequired" and "invalid_grant" in reply["parameters"]["reason"], reply
    assert status_of(daemon)["state"] == "loginRequired"
    for r in resources[1:]:
        reply = call(daemon, "GetToken", resource=r)
        assert reply["error"] == B + "LoginRequired", (r, reply)


def test_status_names_the_strategy_and_keyed_tokens_survive_a_restart(modal_server, api, make_tokend, workdir, mode):
    resources = [api.resource(n) for n in names(3)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    assert status_of(daemon)["strategy"] in ("undetermined", expected_strategy(mode))
    tokens = {r: token(daemon, resource=r) for r in resources}
    status = status_of(daemon)
    assert status["resources"] == resources
    assert status["strategy"] == expected_strategy(mode) and status["strategyReason"], status
    print(f"{mode}: {status['strategy']}: {status['strategyReason']}")
    keyed = {t["resource"]: t for t in status["tokens"] if t.get("resource")}
    if mode == "narrow":  # one token, the session's own, answers every key
        assert not keyed and len({tokens[r]["accessToken"] for r in resources}) == 1, status["tokens"]
    else:
        assert set(keyed) == set(resources)
        assert all(keyed[r]["generation"] == tokens[r]["generation"] for r in resources)
    upstream = len(modal_server.grants())
    assert daemon.stop() == 0
    daemon.start()
    for name, r in zip(names(3), resources):
        again = token(daemon, resource=r)
        assert (again["accessToken"], again["generation"]) == (tokens[r]["accessToken"], tokens[r]["generation"]), r
    assert len(modal_server.grants()) == upstream, "served from the state file, no upstream call"
    restarted = status_of(daemon)
    assert (restarted["strategy"], restarted["strategyReason"]) == (status["strategy"], status["strategyReason"])


# --- tokenctl and the Python client: run once the lead's side has them (--resource, --scope, resource=) ------------


def test_tokenctl_token_names_a_resource_and_a_scope(modal_server, api, make_tokend, workdir):
    resources = [api.resource(n) for n in names(2)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    for name, r in zip(names(2), resources):
        result = daemon.ctl("token", "--session", SESSION, "--resource", r)
        assert result.returncode == 0, result.stderr
        assert accepted(api, name, result.stdout.strip())[0]
    result = daemon.ctl("token", "--session", SESSION, "--resource", resources[0], "--scope", "read")
    assert result.returncode == 0, result.stderr
    assert accepted(api, "api0", result.stdout.strip())[0]
    refused = daemon.ctl("token", "--session", SESSION, "--resource", api.resource("other"))
    assert refused.returncode != 0 and "resource" in refused.stderr.lower(), (refused.returncode, refused.stderr)
    refused = daemon.ctl("token", "--session", SESSION, "--scope", "admin")
    assert refused.returncode != 0 and "scope" in refused.stderr.lower(), (refused.returncode, refused.stderr)


def test_python_client_names_a_resource(modal_server, api, make_tokend, workdir):
    import requests
    from tokend_client import Tokend
    from tokend_client.requests_auth import TokendAuth
    resources = [api.resource(n) for n in names(2)]
    daemon = start(make_tokend, modal_server, piped_session(modal_server, workdir, resources))
    piped_login(daemon, modal_server, resources)
    client = Tokend(socket=daemon.socket)
    for name, r in zip(names(2), resources):
        got = client.get_token(SESSION, resource=r)
        assert accepted(api, name, got.access_token)[0]
        answer = requests.get(r + "items", auth=TokendAuth(client, session=SESSION, resource=r), timeout=30)
        assert answer.status_code == 200 and answer.json()["resource"] == r
    # A 401 for one resource's token: the auth refreshes that key once and retries with the new token.
    refused = client.get_token(SESSION, resource=resources[1])
    api.refuse(refused.access_token)
    answer = requests.get(resources[1] + "items", auth=TokendAuth(client, session=SESSION, resource=resources[1]),
                          timeout=30)
    assert answer.status_code == 200 and answer.json()["token"] != refused.access_token
    assert client.get_token(SESSION, resource=resources[1]).generation == refused.generation + 1
