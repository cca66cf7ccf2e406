# Over 90 s of `make test` on the busy 2-core machine (docs/testing.md; 123 s at load 12-15): each agent is a process of its
# own that imports FastMCP's client (some 3 s of CPU), and the tests start nine.
"""The MCP fixture (mcp.py) against tokend as it is: FastMCP's own MCP server and
OAuth authorization server (code nobody here wrote), a client registered there
by RFC 7591, an admin session in tokend.toml for it, a browser login through an
xdg-open that fetches the page, the token used by FastMCP's Client, and
FastMCP's rotation seen by the server."""
from __future__ import annotations

import json
import os
import subprocess

from conftest import BIN, free_port, wait_for
from mcp import agent, browser_opener, errors, fingerprint, mcp_server, results, start_agent  # noqa: F401 (mcp_server: fixture)


class Placeholder:
    """make_tokend's default session wants a server; this one is never asked (the tests use session "mcp")."""

    def __init__(self, remote):
        self.token_url = remote.token_endpoint
        self.base = remote.base


def mcp_session(remote, client_id, redirect_uri):
    return {"issuer": remote.issuer, "client-id": client_id, "client-auth": "none", "redirect-uri": redirect_uri,
            "resources": [remote.url]}


def assert_streamed_step_by_step(remote, streaming, gate, steps):
    """`streaming` (an agent calling slow_stream with `gate`) has each step's progress before the server is
    let to send the next one, and then the result."""
    try:
        for step in range(1, steps + 1):
            assert streaming.next_matching("progress")["progress"] == step
            assert [e["step"] for e in remote.events("stream_step")] == list(range(1, step + 1))
            if step < steps:
                remote.release(gate, step + 1)
        lines = streaming.finish()
    finally:
        streaming.kill()
    assert results(lines) == [f"streamed {steps} steps"] and not errors(lines), lines


def test_the_server_registers_approves_at_once_and_rotates(mcp_server):
    """Without tokend: what the fixture's server does, seen by a test and by FastMCP's Client."""
    remote = mcp_server(access_ttl=60)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    client = remote.register([redirect])
    assert client["token_endpoint_auth_method"] == "none" and "client_secret" not in client
    assert [r["client_id"] for r in remote.registrations()] == [client["client_id"]]

    first = remote.authorize(client["client_id"], redirect, resource=remote.url)
    assert first["expires_in"] == 60 and first["refresh_token"]
    said = agent(remote.url, "whoami", headers={"Authorization": "Bearer " + first["access_token"]})
    [whoami] = results(said)
    assert whoami["resource"] == remote.url and whoami["token"] == fingerprint(first["access_token"]), said

    status, second = remote.token(grant_type="refresh_token", refresh_token=first["refresh_token"],
                                  client_id=client["client_id"])
    assert status == 200 and second["refresh_token"] != first["refresh_token"], second
    [refresh] = remote.refreshes()
    assert (refresh["old"], refresh["refresh"]) == (fingerprint(first["refresh_token"]), fingerprint(second["refresh_token"]))

    # The rotated refresh token is refused, and so is the access token issued with it.
    status, body = remote.token(grant_type="refresh_token", refresh_token=first["refresh_token"],
                                client_id=client["client_id"])
    assert (status, body["error"]) == (401, "invalid_grant"), body
    assert [(r["refresh"], r["reason"]) for r in remote.refused_refreshes()] == [(fingerprint(first["refresh_token"]), "rotated")]
    said = agent(remote.url, "count", headers={"Authorization": "Bearer " + first["access_token"]})
    assert [line["http"] for line in said if "http" in line][:1] == [401] and errors(said), said
    assert remote.events("access_refused")[-1]["reason"] == "rotated"
    assert results(agent(remote.url, "count", headers={"Authorization": "Bearer " + second["access_token"]})) == [1]


def test_a_slow_answer_is_streamed_step_by_step(mcp_server):
    """slow_stream with a gate: the agent has step 1 before the server is let to send step 2."""
    remote = mcp_server(access_ttl=60)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    tokens = remote.authorize(remote.register([redirect])["client_id"], redirect)
    streaming = start_agent(remote.url, "slow_stream", arguments={"steps": 3, "gate": "g"},
                            headers={"Authorization": "Bearer " + tokens["access_token"]})
    assert_streamed_step_by_step(remote, streaming, "g", 3)


def test_tokend_logs_in_an_admin_session_for_it_through_the_browser(mcp_server, make_tokend, workdir):
    """A client registered at the FastMCP server, an admin session naming its http loopback issuer,
    `tokenctl login --browser` with an xdg-open that fetches the page: tokend's access token
    calls the tool."""
    remote = mcp_server(access_ttl=60)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    client = remote.register([redirect])
    daemon = make_tokend(Placeholder(remote), sessions={"mcp": mcp_session(remote, client["client_id"], redirect)})
    daemon.start()
    env = browser_opener(workdir)
    login = subprocess.run([os.path.join(BIN, "tokenctl"), "login", "--browser", "--session", "mcp",
                            "--socket", daemon.socket], env=env, capture_output=True, text=True, timeout=120)
    assert login.returncode == 0, (login.stdout, login.stderr, daemon.logs()[-3000:])
    with open(os.path.join(workdir, "opened")) as f:
        assert f.read().startswith(redirect.rsplit("/", 1)[0] + "/start/"), "tokenctl opened its own start page"
    [authorize] = remote.events("authorize")
    assert (authorize["client_id"], authorize["redirect_uri"], authorize["resource"]) == (
        client["client_id"], redirect, remote.url)
    [code] = remote.events("code")

    token = daemon.ctl("token", "--session", "mcp")
    assert token.returncode == 0, token.stderr
    access = token.stdout.strip()
    assert fingerprint(access) == code["access"], "the access token the login got"
    said = agent(remote.url, "whoami", headers={"Authorization": "Bearer " + access})
    [whoami] = results(said)
    assert (whoami["client_id"], whoami["resource"]) == (client["client_id"], remote.url), said

    # A refresh through tokend rotates: the server answered the login's refresh token once.
    refreshed = daemon.ctl("refresh", "--session", "mcp")
    assert refreshed.returncode == 0, refreshed.stderr
    [refresh] = remote.refreshes()
    assert refresh["old"] == code["refresh"], "tokend refreshed with the login's refresh token"
    new = daemon.ctl("token", "--session", "mcp").stdout.strip()
    assert fingerprint(new) == refresh["access"]
    assert results(agent(remote.url, "count", headers={"Authorization": "Bearer " + new})) == [1]
    assert remote.refused_refreshes() == []


def test_tokend_refreshing_revokes_the_refresh_token_it_was_given(mcp_server, make_tokend, workdir):
    """A refresh token the test holds, handed to tokend: after tokend's refresh, FastMCP refuses it
    (reason "rotated" in its events) and the access token issued with it."""
    remote = mcp_server(access_ttl=60)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    client = remote.register([redirect])
    first = remote.authorize(client["client_id"], redirect, resource=remote.url)
    daemon = make_tokend(Placeholder(remote), sessions={"mcp": mcp_session(remote, client["client_id"], redirect)})
    daemon.start()
    login = daemon.ctl("login", "--session", "mcp", input=first["refresh_token"] + "\n")
    assert login.returncode == 0, (login.stderr, daemon.logs()[-3000:])
    refreshed = daemon.ctl("refresh", "--session", "mcp")
    assert refreshed.returncode == 0, refreshed.stderr
    refreshes = remote.refreshes()
    assert refreshes and refreshes[0]["old"] == fingerprint(first["refresh_token"]), refreshes

    status, body = remote.token(grant_type="refresh_token", refresh_token=first["refresh_token"],
                                client_id=client["client_id"])
    assert (status, body.get("error")) == (401, "invalid_grant"), body
    assert [(r["refresh"], r["reason"]) for r in remote.refused_refreshes()] == [
        (fingerprint(first["refresh_token"]), "rotated")]
    access = daemon.ctl("token", "--session", "mcp").stdout.strip()
    assert fingerprint(access) == refreshes[-1]["access"]
    assert results(agent(remote.url, "count", headers={"Authorization": "Bearer " + access})) == [1]
    status = json.loads(daemon.ctl("status", "--session", "mcp", "--json").stdout)
    assert status["state"] == "active", status


def test_an_agent_without_oauth_streams_through_tokend_proxy(mcp_server, make_tokend, workdir):
    """FastMCP's Client, no OAuth configured, calls through tokend-proxy (the session's token for the MCP
    URL added by the proxy): the slow answer's steps reach it one by one, each before the next is sent."""
    remote = mcp_server(access_ttl=60)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    client = remote.register([redirect])
    first = remote.authorize(client["client_id"], redirect, resource=remote.url)
    daemon = make_tokend(Placeholder(remote), sessions={"mcp": mcp_session(remote, client["client_id"], redirect)})
    daemon.start()
    assert daemon.ctl("login", "--session", "mcp", input=first["refresh_token"] + "\n").returncode == 0
    port = free_port()
    log = os.path.join(workdir, "proxy.log")
    # The upstream is the server's origin: the proxy appends the request's path (/mcp) to it.
    proxy = subprocess.Popen([os.path.join(BIN, "tokend-proxy"), "--session", "mcp", "--resource", remote.url,
                              "--socket", daemon.socket, "--listen", f"tcp:127.0.0.1:{port}", "--upstream", remote.base],
                             stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "listening" in open(log).read(), 30, "tokend-proxy listening")
        streaming = start_agent(f"http://127.0.0.1:{port}/mcp", "slow_stream", arguments={"steps": 3, "gate": "p"})
        assert_streamed_step_by_step(remote, streaming, "p", 3)
    finally:
        proxy.kill()
        proxy.wait(20)
    [call] = remote.calls("slow_stream")
    assert call["token"] in [r["access"] for r in remote.refreshes()], "a token tokend got (login refreshes once)"
