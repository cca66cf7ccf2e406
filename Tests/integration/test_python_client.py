"""The Python client (clients/python) against the built tokend and the real
authorization server, with a test API that refuses the current token."""
import asyncio
import os
import threading

import httpx
import pytest
import requests

from conftest import login, wait_for
from testapi import TestAPI
from tokend_client import AsyncTokend, NoSuchSession, Tokend, Unreachable
from tokend_client import httpx_auth, requests_auth


@pytest.fixture
def api():
    instance = TestAPI()
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
