"""What the tests of tokens per resource (issue #30) share: the authorization
server in either refresh mode, grants that carry RFC 8707 resources obtained
over HTTP (password, device and authorization-code flows; alice's part is done
by an HTTP client signed in at the server's pages), readings of the server's
grant log, and a burst of GetToken calls over many connections.

Run as a script, it measures what each server mode does with resources and
prints one line per step:

    .venv/bin/python Tests/integration/resources.py
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import html.parser
import json
import os
import secrets
import shutil
import sys
import tempfile
import urllib.parse

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import CLIENT_ID, CLIENT_SECRET, AuthServer  # noqa: E402
from testapi import TestAPI  # noqa: E402

MODES = ("narrow", "keep-wide")
DEVICE_CLIENT, BROWSER_CLIENT = "tokend-device", "tokend-browser"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
Reply = tuple[int, dict]


def mode_server(directory: str, mode: str, access_ttl: int = 3600, extra: tuple[str, ...] = ()) -> AuthServer:
    return AuthServer(directory, access_ttl=access_ttl, extra=["--refresh-resources", mode, *extra])


# Fixtures for test modules that import them: each test runs against both behaviours.
@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def modal_server(workdir, mode):
    instance = mode_server(os.path.join(workdir, "as"), mode)
    yield instance
    instance.stop()


@pytest.fixture
def resource_api(modal_server):
    """The test API as resource servers (api0, api1, ...) that accept a token only for their own audience."""
    instance = TestAPI(introspection=modal_server.base + "/o/introspect/")
    yield instance
    instance.stop()


def post_form(url: str, fields: list[tuple[str, str]], client: tuple[str, str] | None = (CLIENT_ID, CLIENT_SECRET)) -> Reply:
    """A form POST with repeatable fields (RFC 8707 repeats `resource`); `client` authenticates with Basic."""
    response = requests.post(url, data=fields, auth=client, timeout=30)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, {}


def with_resources(fields: list[tuple[str, str]], resources: list[str], scope: str | None) -> list[tuple[str, str]]:
    return fields + [("resource", r) for r in resources] + ([("scope", scope)] if scope else [])


def password_grant(server: AuthServer, resources: list[str], scope: str | None = None) -> Reply:
    fields = [("grant_type", "password"), ("username", "alice"), ("password", "alice-password")]
    return post_form(server.token_url, with_resources(fields, resources, scope))


def refresh(server: AuthServer, refresh_token: str, resources: list[str] = (), scope: str | None = None,
            client: tuple[str, str] | None = (CLIENT_ID, CLIENT_SECRET), client_id: str | None = None) -> Reply:
    fields = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)]
    if client_id:
        fields.append(("client_id", client_id))
    return post_form(server.token_url, with_resources(fields, list(resources), scope), client)


def introspect(server: AuthServer, access_token: str) -> dict:
    """The server's RFC 7662 answer for a token (aud: its resources)."""
    return post_form(server.base + "/o/introspect/", [("token", access_token)])[1]


class HiddenFields(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("type") == "hidden" and found.get("name"):
            self.fields[found["name"]] = found.get("value") or ""


def hidden_fields(page: str) -> dict[str, str]:
    parser = HiddenFields()
    parser.feed(page)
    return parser.fields


class User:
    """alice at the server's pages (sign-in, device approval, authorization), over HTTP."""

    def __init__(self, server: AuthServer) -> None:
        self.server = server
        self.http = requests.Session()
        page = self.http.get(server.base + "/accounts/login/", timeout=30)
        signed_in = self.http.post(server.base + "/accounts/login/", timeout=30, allow_redirects=False, data={
            "username": "alice", "password": "alice-password", "next": "/o/device/",
            "csrfmiddlewaretoken": hidden_fields(page.text)["csrfmiddlewaretoken"]})
        assert signed_in.status_code == 302, f"sign-in answered {signed_in.status_code}"

    def post_page(self, url: str, extra: dict[str, str]) -> requests.Response:
        """Submits the form on the page at `url` with its hidden fields and `extra`."""
        page = self.http.get(url, timeout=30)
        assert page.status_code == 200, f"{url}: {page.status_code}"
        return self.http.post(page.url, data={**hidden_fields(page.text), **extra}, timeout=30, allow_redirects=False)

    def approve_device(self, user_code: str) -> None:
        entered = self.post_page(self.server.base + "/o/device/", {"user_code": user_code})
        assert entered.status_code == 302, f"user code answered {entered.status_code}"
        decided = self.post_page(urllib.parse.urljoin(self.server.base, entered.headers["Location"]),
                                 {"action": "accept"})
        assert decided.status_code == 302, f"approval answered {decided.status_code}"

    def authorize(self, url: str) -> str:
        """Approves the authorization request at `url`; returns the redirect (with the code)."""
        decided = self.post_page(url, {"allow": "Authorize"})
        assert decided.status_code == 302, f"authorization answered {decided.status_code}"
        return decided.headers["Location"]


def device_grant(server: AuthServer, resources: list[str], scope: str = "read write") -> Reply:
    """The whole device flow (RFC 8628) for the public client, resources named at device authorization only."""
    status, started = post_form(server.base + "/o/device-authorization/",
                                with_resources([("client_id", DEVICE_CLIENT)], resources, scope), client=None)
    assert status == 200, started
    User(server).approve_device(started["user_code"])
    return post_form(server.token_url, [("grant_type", DEVICE_GRANT), ("device_code", started["device_code"]),
                                        ("client_id", DEVICE_CLIENT)], client=None)


def code_grant(server: AuthServer, resources: list[str], scope: str = "read write") -> Reply:
    """The authorization-code flow with PKCE, resources named at authorization only."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    redirect = "http://127.0.0.1:9/callback"
    query = with_resources([("response_type", "code"), ("client_id", BROWSER_CLIENT), ("redirect_uri", redirect),
                            ("code_challenge", challenge), ("code_challenge_method", "S256"), ("state", "s")],
                           resources, scope)
    location = User(server).authorize(server.base + "/o/authorize/?" + urllib.parse.urlencode(query))
    code = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)["code"][0]
    return post_form(server.token_url, [("grant_type", "authorization_code"), ("code", code), ("client_id", BROWSER_CLIENT),
                                        ("redirect_uri", redirect), ("code_verifier", verifier)], client=None)


def refreshes(server: AuthServer, since: int = 0) -> list[dict]:
    """The refresh grants the server saw, from the `since`-th on."""
    return server.grants("refresh_token")[since:]


def overlapping(entries: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of requests the server was serving at the same time."""
    ordered = sorted(entries, key=lambda e: e["start"])
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if b["start"] < a["t"]]


def live_families(server: AuthServer) -> int:
    """Token families the server still honours (a revoked family has no unrevoked token)."""
    import sqlite3
    with sqlite3.connect(os.path.join(server.directory, "db.sqlite3")) as db:
        return db.execute("select count(distinct token_family) from oauth2_provider_refreshtoken"
                          " where revoked is null").fetchone()[0]


async def _burst(path: str, calls: list[dict]) -> list[dict]:
    connections = [await asyncio.open_unix_connection(path) for _ in calls]
    for (_, writer), call in zip(connections, calls):
        writer.write(json.dumps(call).encode() + b"\0")
    await asyncio.gather(*(writer.drain() for _, writer in connections))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict:
        frame = await asyncio.wait_for(reader.readuntil(b"\0"), 120)
        writer.close()
        return json.loads(frame[:-1])

    return await asyncio.gather(*(answer(reader, writer) for reader, writer in connections))


def burst(path: str, calls: list[dict]) -> list[dict]:
    """Every call on a connection of its own: all connected first, then all sent at once."""
    return asyncio.run(_burst(path, calls))


def measure() -> None:
    """What a refresh does to resources in each mode, step by step."""
    a, b, c = "https://a.test/", "https://b.test/", "https://c.test/"
    for mode in MODES:
        directory = tempfile.mkdtemp(prefix="tkres", dir="/tmp")
        server = mode_server(os.path.join(directory, "as"), mode)
        try:
            def show(step: str, reply: Reply) -> str:
                status, body = reply
                entry = server.grants()[-1]
                issued = entry.get("issued") or {}
                print(f"{mode:9} {step:38} {status} {body.get('error', ''):14} access {issued.get('resource')} "
                      f"refresh {issued.get('refresh_resource')} scope {issued.get('scope')}")
                return body.get("refresh_token", "")

            token = show("password grant, resource=A B C", password_grant(server, [a, b, c], "read write"))
            reply = refresh(server, token, [a])
            token = show("refresh resource=A", reply) or token
            earlier = reply[1]["access_token"]
            token = show("refresh (no resource)", refresh(server, token)) or token
            print(f"{mode:9} {'the access token before it is active':38} {introspect(server, earlier).get('active')}")
            token = show("refresh resource=B", refresh(server, token, [b])) or token
            token = show("refresh resource=A B", refresh(server, token, [a, b])) or token
            token = show("refresh (no resource)", refresh(server, token)) or token
            token = show("refresh scope=read", refresh(server, token, scope="read")) or token
            token = show("refresh scope=write", refresh(server, token, scope="write")) or token
            show("device grant, resource=A B", device_grant(server, [a, b]))
            show("code grant, resource=A B", code_grant(server, [a, b]))
            used = token
            show("refresh", refresh(server, used))
            show("refresh with the used token again", refresh(server, used))
            print(f"{mode:9} {'reuse logged':38} {server.grants()[-1]['reuse']} family revoked "
                  f"{server.grants()[-1]['family_revoked']}")
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    measure()
