# Over 90 s of `make test` (docs/testing.md): stampedes of 100 threads and 100 asyncio tasks at a 401,
# timeouts and dropped connections waited out, each test with its own tokend and provider (143 s summed on the
# busy 2-core machine).
"""The Python client (clients/python) against the built tokend and the real
authorization server, with a test API that refuses the current token."""
import asyncio
import json
import os
import socket
import threading
from types import SimpleNamespace

import httpx
import pytest
import requests

from conftest import login, read_frame, wait_for
from faultproxy import FaultProxy
from resources import modal_server, mode, password_grant, resource_api  # noqa: F401 (fixtures)
from testapi import TestAPI
from tokend_client import AsyncTokend, NoSuchSession, ResourceNotAllowed, ScopeNotAllowed, Tokend, Unreachable
from tokend_client import httpx_auth, requests_auth


@pytest.fixture
def api():
    instance = TestAPI()
    yield instance
    instance.stop()


@pytest.fixture
def proxy(server):
    instance = FaultProxy(server.base)
    yield instance
    instance.stop()


def test_100_threads_with_the_requests_auth_cause_one_refresh(server, make_tokend, api):
    daemon = make_tokend(server).start()
    login(daemon, server)
    tokend = Tokend(socket=daemon.socket)
    api.refuse(tokend.get_token().access_token, callers=100)
    before = len(server.grants("refresh_token"))
    statuses = []

    def one():
        statuses.append(requests.get(api.url + "/data", auth=requests_auth.TokendAuth(tokend), timeout=30).status_code)
    threads = [threading.Thread(target=one) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert statuses == [200] * 100
    assert len(server.grants("refresh_token")) == before + 1, "one refresh for 100 callers that met a 401"
    assert sum(1 for path, token, _ in api.seen if path == "/data" and token in api.refused) == 100


def test_100_asyncio_tasks_with_the_httpx_auth_cause_one_refresh(server, make_tokend, api):
    daemon = make_tokend(server).start()
    login(daemon, server)
    api.refuse(Tokend(socket=daemon.socket).get_token().access_token, callers=100)
    before = len(server.grants("refresh_token"))

    async def main():
        auth = httpx_auth.TokendAuth(async_tokend=AsyncTokend(socket=daemon.socket))
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(auth=auth, limits=limits, timeout=30) as client:
            return await asyncio.gather(*(client.get(api.url + "/data") for _ in range(100)))
    responses = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 100
    assert len(server.grants("refresh_token")) == before + 1
    assert sum(1 for path, token, _ in api.seen if path == "/data" and token in api.refused) == 100
    # The synchronous httpx client too, with a request body to send again.
    api.refuse(Tokend(socket=daemon.socket).get_token().access_token)
    with httpx.Client(auth=httpx_auth.TokendAuth(tokend=Tokend(socket=daemon.socket))) as client:
        assert client.get(api.url + "/data").status_code == 200
    assert len(server.grants("refresh_token")) == before + 2


def test_typed_errors_cookies_and_events(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    tokend = Tokend(socket=daemon.socket)
    with pytest.raises(Unreachable):
        Tokend(socket=os.path.join(workdir, "nothing-here")).get_token()
    with pytest.raises(NoSuchSession):
        tokend.get_token(session="nope")
    login(daemon, server)
    token = tokend.get_token(min_valid=10)
    assert token.token_type == "Bearer" and token.generation >= 1
    assert tokend.cookies("https://app.example/").header == ""
    events = []

    def watch():
        for event in tokend.events():
            events.append(event)
            if event.event == "refreshed":
                return
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_for(lambda: events, 10, "the status event")
    refreshed = tokend.refresh(stale_generation=token.generation)
    watcher.join(10)
    kinds = [e.event for e in events]  # the refresh's cookies come first, then the refresh itself
    assert kinds[0] == "status" and kinds[-1] == "refreshed" and set(kinds[1:-1]) <= {"cookies"}, kinds
    assert events[-1].generation == refreshed.generation
    assert tokend.get_token() == refreshed, "the client's other calls did not wait on the stream"


def test_a_cancelled_call_leaves_no_reply_for_the_next(server, proxy, make_tokend):
    # The provider is slow: a Refresh cancelled by wait_for is still answered
    # by tokend later, on the connection it was sent on.
    endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
    daemon = make_tokend(endpoint, **{"upstream-timeout": 2}).start()
    login(daemon, server)
    tokend = Tokend(socket=daemon.socket)
    token = tokend.get_token()
    proxy.mode = "hang"

    async def main():
        client = AsyncTokend(socket=daemon.socket)
        await client.status()  # the call below goes on a connection already in use
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.refresh(stale_generation=token.generation), 0.5)
        status = await client.status()
        cookies = await client.cookies("https://app.example/")
        again = await client.get_token()
        return status, cookies, again
    status, cookies, again = asyncio.run(main())
    assert proxy.calls("hang"), "the refresh was at the provider when it was cancelled"
    assert status["session"] == "default" and status["generation"] == token.generation, status
    assert cookies.header == "" and cookies.version >= 0
    assert again == token


def test_a_login_that_times_out_is_sent_once(server, proxy, make_tokend):
    # The provider hangs longer than the client waits: Login and BeginLogin
    # fail with a timeout and are not sent again.
    endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
    device = {"token-endpoint": server.token_url, "device-authorization-endpoint": proxy.url + "/o/device-authorization/",
              "client-id": "tokend-device", "client-auth": "none"}
    daemon = make_tokend(endpoint, sessions={"dev": device}, **{"upstream-timeout": 5}).start()
    proxy.mode = "hang"
    status, grant = server.password_grant()
    assert status == 200, grant
    tokend = Tokend(socket=daemon.socket, timeout=1)
    with pytest.raises(Unreachable) as login:
        tokend.call("Login", refreshToken=grant["refresh_token"])
    with pytest.raises(Unreachable) as begin:
        tokend.call("BeginLogin", session="dev", flow="device")
    # tokend logs each login call as it reads it; a resent one came 1 s before the client gave up.
    assert daemon.logs().count("login requested") == 2, daemon.logs()
    assert len(proxy.calls("hang")) == 2, "one token request for the Login, one device request for the BeginLogin"
    assert "no reply within 1 s" in str(login.value) and "no reply within 1 s" in str(begin.value)
    # The client goes on with a new connection.
    proxy.mode = "pass"
    assert Tokend(socket=daemon.socket).status()["session"] == "default"
    assert tokend.status()["session"] == "default"


def test_a_connection_tokend_closed_while_idle_is_replaced(server, make_tokend):
    daemon = make_tokend(server, daemon={"idle-timeout": 1}).start()
    status, grant = server.password_grant()
    assert status == 200, grant
    tokend = Tokend(socket=daemon.socket)
    assert tokend.status()["state"] == "loginRequired"
    wait_for(lambda: "idle for 1 s" in daemon.logs(), 10, "tokend closing the idle connection")
    assert tokend.call("Login", refreshToken=grant["refresh_token"])["status"]["state"] == "active"
    assert daemon.logs().count("login requested") == 1
    tokend.close()

    async def main():
        client = AsyncTokend(socket=daemon.socket)
        await client.status()
        wait_for(lambda: daemon.logs().count("idle for 1 s") == 2, 10, "tokend closing the idle connection")
        return await client.status()
    assert asyncio.run(main())["state"] == "active"


def test_the_client_works_with_descriptors_above_1024(server, make_tokend):
    """A busy program (a server with many sockets) holds descriptors past
    select()'s limit: calls on a reused connection must still work."""
    import resource
    daemon = make_tokend(server).start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), max(hard, 2048)))
    held = [open(os.devnull) for _ in range(1100)]
    try:
        tokend = Tokend(socket=daemon.socket)
        assert tokend.status()["state"] == "loginRequired"
        assert tokend.status()["state"] == "loginRequired", "the second call reuses the connection"
    finally:
        for f in held:
            f.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- tokens per resource and scope (issue #30) ------------------------------------------------------------------------
# In both of the test server's refresh modes (resources.py): "narrow" (django-oauth-toolkit as it is) makes the
# session "shared-audience", its own token (audience: every resource of the grant) answering every key, named for
# the key; "keep-wide" (one resource per access token) makes it "per-resource", each key a token and generation of
# its own.

APIS = "apis"


def resource_session(server, make_tokend, workdir, resources):
    """A started tokend whose session "apis" serves `resources`, logged in with a grant for all of them."""
    session = {"token-endpoint": server.token_url, "client-id": "tokend-test",
               "client-secret-file": os.path.join(workdir, "client-secret"), "scope": "read write",
               "resources": resources, "introspection-endpoint": server.base + "/o/introspect/"}
    daemon = make_tokend(server, sessions={APIS: session}).start()
    status, grant = password_grant(server, resources, "read write")
    assert status == 200, grant
    assert Tokend(socket=daemon.socket).call("Login", session=APIS, refreshToken=grant["refresh_token"])
    return daemon


def strategy(tokend):
    """The session's strategy, once a key's token has made tokend learn it."""
    status = tokend.status(APIS)
    assert status["strategy"] in ("shared-audience", "per-resource") and status["strategyReason"], status
    return status["strategy"]


def expected_strategy(mode):
    return "shared-audience" if mode == "narrow" else "per-resource"


def keyed_generations(tokend):
    """The generations of the keys the session holds tokens of its own for (none under shared-audience)."""
    return {(t.get("resource"), t.get("scope")): t["generation"] for t in tokend.status(APIS)["tokens"]}


def test_a_token_for_a_resource_names_it_and_others_are_refused(modal_server, mode, make_tokend, workdir,
                                                                resource_api):
    resources = [resource_api.resource("api0"), resource_api.resource("api1")]
    daemon = resource_session(modal_server, make_tokend, workdir, resources)
    tokend = Tokend(socket=daemon.socket)
    keyed = {}
    for name, resource in zip(("api0", "api1"), resources):
        token = tokend.get_token(APIS, resource=resource)
        keyed[resource] = token
        assert token.resource == resource and token.generation >= 1, token
        status, document, _ = resource_api.check(name, token.access_token, None)
        assert status == 200 and resource in document["aud"], document
    narrow = tokend.get_token(APIS, resource=resources[0], scope="read")
    assert narrow.resource == resources[0] and "read" in (narrow.scope or "").split(), narrow
    own = tokend.get_token(APIS)
    assert own.resource is None
    upstream = len(modal_server.grants())
    other = resource_api.resource("other")
    with pytest.raises(ResourceNotAllowed) as refused:
        tokend.get_token(APIS, resource=other)
    assert refused.value.resource == other and other in str(refused.value)
    with pytest.raises(ResourceNotAllowed):
        tokend.refresh(APIS, resource=other)
    with pytest.raises(ScopeNotAllowed) as beyond:
        tokend.get_token(APIS, resource=resources[0], scope="read admin")
    assert set(beyond.value.scope.split()) == {"read", "admin"}, beyond.value.parameters
    assert len(modal_server.grants()) == upstream, "refused without asking the provider"
    status = tokend.status(APIS)
    assert status["resources"] == resources and status["webResources"] == []
    assert strategy(tokend) == expected_strategy(mode), status
    held = keyed_generations(tokend)
    if mode == "narrow":
        # The session's one token, its audience both APIs, answers every key under the session's generation.
        assert held == {}, held
        assert {t.access_token for t in (*keyed.values(), narrow)} == {own.access_token}
        assert {t.generation for t in (*keyed.values(), narrow)} == {status["generation"]} == {own.generation}
        assert set(resource_api.check("api1", keyed[resources[0]].access_token, None)[1]["aud"]) >= set(resources)
    else:
        # Each key is a token of its own, for its resource only: api1 refuses api0's.
        assert held == {(resources[0], None): keyed[resources[0]].generation,
                        (resources[1], None): keyed[resources[1]].generation,
                        (resources[0], "read"): narrow.generation}, held
        assert len({t.access_token for t in (*keyed.values(), narrow, own)}) == 4
        assert resource_api.check("api1", keyed[resources[0]].access_token, None)[0] == 401


def test_events_of_a_resource_carry_its_refreshes_only(modal_server, mode, make_tokend, workdir, resource_api):
    resources = [resource_api.resource("api0"), resource_api.resource("api1")]
    daemon = resource_session(modal_server, make_tokend, workdir, resources)
    tokend = Tokend(socket=daemon.socket)
    first = {r: tokend.get_token(APIS, resource=r) for r in resources}
    shared = strategy(tokend) == "shared-audience"
    assert shared is (mode == "narrow")
    # Under shared-audience api1 is served by the session's own token: the stream follows that token.
    key = None if shared else resources[1]
    events = []

    def watch():
        for event in tokend.events(APIS, resource=resources[1]):
            events.append(event)
            if event.event == "refreshed":
                return
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # The same subscription, read raw: what tokend sends.
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(daemon.socket)
    raw.sendall(json.dumps({"method": "io.tokend.Broker.Subscribe", "more": True,
                            "parameters": {"session": APIS, "resource": resources[1]}}).encode() + b"\0")
    assert json.loads(read_frame(raw))["parameters"]["event"] == "status"
    wait_for(lambda: events, 10, "the status event")
    assert (events[0].event, events[0].resource) == ("status", key)
    assert events[0].generation == first[resources[1]].generation
    if shared:
        # A refresh named for api0 is the session's one refresh: api1's subscribers get it, unnamed.
        zero = tokend.refresh(APIS, first[resources[0]].generation, resource=resources[0])
        watcher.join(10)
        refreshed = [e for e in events if e.event == "refreshed"]
        assert [(e.resource, e.generation) for e in refreshed] == [(None, zero.generation)], events
        assert zero.generation == first[resources[0]].generation + 1
        assert tokend.get_token(APIS, resource=resources[1]).access_token == zero.access_token
        expected = [(None, zero.generation)]
    else:
        # api0's refresh comes first: tokend sends it to this subscriber too, named; the stream skips it.
        zero = tokend.refresh(APIS, first[resources[0]].generation, resource=resources[0])
        one = tokend.refresh(APIS, first[resources[1]].generation, resource=resources[1])
        watcher.join(10)
        refreshed = [e for e in events if e.event == "refreshed"]
        assert [(e.resource, e.generation) for e in refreshed] == [(resources[1], one.generation)], events
        expected = [(resources[0], zero.generation), (resources[1], one.generation)]
    assert not watcher.is_alive(), "the stream yielded its refreshed event"
    sent = []
    while len(sent) < len(expected):
        event = json.loads(read_frame(raw))["parameters"]
        if event["event"] == "refreshed":
            sent.append((event.get("resource"), event["generation"]))
    raw.close()
    assert sent == expected


def test_the_auth_classes_retry_once_after_a_401_for_their_resource(modal_server, mode, make_tokend, workdir,
                                                                    resource_api):
    resources = [resource_api.resource("api0"), resource_api.resource("api1")]
    daemon = resource_session(modal_server, make_tokend, workdir, resources)
    tokend = Tokend(socket=daemon.socket)
    target = resources[1]
    tokend.get_token(APIS, resource=target)
    shared = strategy(tokend) == "shared-audience"
    assert shared is (mode == "narrow")

    def generation(scope=None):
        """The generation that serves (target, scope): the session's own under shared-audience, else the key's."""
        if shared:
            assert keyed_generations(tokend) == {}, "no token of its own for any key"
            return tokend.status(APIS)["generation"]
        return keyed_generations(tokend)[(target, scope)]

    # requests: the resource server refuses the key's token once; the auth class refreshes that key and retries.
    refused = tokend.get_token(APIS, resource=target)
    own = tokend.get_token(APIS)
    assert generation() == refused.generation
    resource_api.refuse(refused.access_token)
    before = len(modal_server.grants("refresh_token"))
    answer = requests.get(target + "items", auth=requests_auth.TokendAuth(tokend, APIS, resource=target), timeout=30)
    assert answer.status_code == 200 and [r.status_code for r in answer.history] == [401], answer.text
    assert answer.json()["resource"] == target and answer.json()["token"] != refused.access_token
    assert resource_api.checks[-2:] == [(target, 401), (target, 200)]
    assert len(modal_server.grants("refresh_token")) == before + 1, "one upstream refresh"
    assert generation() == refused.generation + 1, "the generation serving that key moved"
    if shared:
        assert tokend.get_token(APIS).access_token == answer.json()["token"], "the session's one token was refreshed"
    else:
        assert tokend.get_token(APIS) == own, "the session's own token was not the one refreshed"
    # httpx, asynchronous: 20 requests, those that meet the 401 ask for a refresh naming the refused
    # generation; one refresh of the key serves them all.
    refused = tokend.get_token(APIS, resource=target)
    resource_api.refuse(refused.access_token)
    before = len(modal_server.grants("refresh_token"))
    checked = len(resource_api.checks)

    async def main():
        auth = httpx_auth.TokendAuth(async_tokend=AsyncTokend(socket=daemon.socket), session=APIS, resource=target)
        async with httpx.AsyncClient(auth=auth, timeout=30) as client:
            return await asyncio.gather(*(client.get(target + "items") for _ in range(20)))
    responses = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 20
    assert {r.json()["resource"] for r in responses} == {target}
    met = sum(1 for _, status in resource_api.checks[checked:] if status == 401)
    assert met >= 2 and sum(len(r.history) for r in responses) == met, f"{met} requests met the 401"
    assert all(len(r.history) <= 1 for r in responses), "one retry at most"
    assert len(modal_server.grants("refresh_token")) == before + 1
    print(f"\n{mode}: {met} of 20 requests met the 401 for {target}; 1 upstream refresh")
    assert generation() == refused.generation + 1
    # httpx, synchronous, with a scope: per resource the key (api1, read) is its own and a 401 refreshes it
    # alone; under shared-audience it is the session's token again.
    auth = httpx_auth.TokendAuth(tokend=tokend, session=APIS, resource=target, scope="read")
    narrow = tokend.get_token(APIS, resource=target, scope="read")
    assert generation("read") == narrow.generation
    wide = tokend.get_token(APIS, resource=target)
    resource_api.refuse(narrow.access_token)
    with httpx.Client(auth=auth, timeout=30) as client:
        answer = client.get(target + "items", params={"scope": "read"})
    assert answer.status_code == 200 and [r.status_code for r in answer.history] == [401], answer.text
    fresh = tokend.get_token(APIS, resource=target, scope="read")
    assert fresh.generation == narrow.generation + 1 and answer.json()["token"] == fresh.access_token
    assert generation("read") == fresh.generation
    if not shared:
        assert tokend.get_token(APIS, resource=target) == wide, "(api1, no scope) was not refreshed"
    # An API that refuses every token: the auth class refreshes and retries once, and the second 401 stands.
    resource_api.refused = EveryToken()
    before = len(modal_server.grants("refresh_token"))
    checked = len(resource_api.checks)
    answer = requests.get(target + "items", auth=requests_auth.TokendAuth(tokend, APIS, resource=target), timeout=30)
    assert answer.status_code == 401 and [r.status_code for r in answer.history] == [401], answer.text
    assert resource_api.checks[checked:] == [(target, 401), (target, 401)], "one retry"
    assert len(modal_server.grants("refresh_token")) == before + 1, "one refresh for the one retry"


class EveryToken:
    """A refused set that holds every token."""

    def __contains__(self, token: object) -> bool:
        return True

    def add(self, token: str) -> None:
        pass


def test_an_auth_class_gives_up_on_a_resource_the_session_does_not_serve(server, make_tokend, workdir, resource_api):
    resources = [resource_api.resource("api0")]
    daemon = resource_session(server, make_tokend, workdir, resources)
    auth = requests_auth.TokendAuth(Tokend(socket=daemon.socket), APIS, resource=resource_api.resource("api1"))
    with pytest.raises(ResourceNotAllowed):
        requests.get(resource_api.resource("api1") + "items", auth=auth, timeout=30)
    assert resource_api.checks == [], "no request went out without a token"
