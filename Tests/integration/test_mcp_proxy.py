# Over 90 s of `make test` (docs/testing.md): ten FastMCP agents (a Python process each) calling through the proxy
# across three refreshes of 10 s tokens, streams whose events come 4 s apart, and an agent process per check
# (about 210 s summed on the busy 2-core machine, 357 s beside other files' tests).
"""tokend-proxy in front of a remote MCP server (FastMCP's own, with its own OAuth authorization server:
Tests/mcpserver, mcp.py), its agents FastMCP's Client with no OAuth of their own: streamable HTTP relayed
as it comes, one refresh for many agents across token lifetimes, a session that needs a login said in
plain words (never the server's challenge), and the proxy of one person's session refused to another."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request

from conftest import BIN, free_port, wait_for
from mcp import Agent, agent, agent_command, errors, fingerprint, mcp_server, results, start_agent  # noqa: F401 (fixture)
from test_proxy import ProxyProcess


class Placeholder:
    """make_tokend's default session wants a server; this one is never asked (the tests use session "mcp")."""

    def __init__(self, remote):
        self.token_url = remote.token_endpoint
        self.base = remote.base


def logged_in(remote, make_tokend, **keys):
    """tokend with an admin session "mcp" for `remote` (a client registered there by RFC 7591), logged in
    with the refresh token of a login made at the server: (tokend, the login's token response)."""
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    client = remote.register([redirect])
    session = {"issuer": remote.issuer, "client-id": client["client_id"], "client-auth": "none",
               "redirect-uri": redirect, "resources": [remote.url], **keys}
    daemon = make_tokend(Placeholder(remote), sessions={"mcp": session}).start()
    first = remote.authorize(client["client_id"], redirect, resource=remote.url)
    login = daemon.ctl("login", "--session", "mcp", input=first["refresh_token"] + "\n")
    assert login.returncode == 0, (login.stderr, daemon.logs()[-3000:])
    daemon.client_id = client["client_id"]
    return daemon, first


def mcp_proxy(daemon, remote, workdir, *extra):
    """tokend-proxy for session "mcp" on a TCP port, its upstream the server: agents use proxy.url."""
    proxy = ProxyProcess(daemon, remote.base, workdir, "--session", "mcp", "--resource", remote.url, *extra,
                         port=free_port())
    proxy.url = f"http://127.0.0.1:{proxy.port}/mcp"
    return proxy


def test_a_slow_stream_arrives_as_it_comes_and_a_short_timeout_does_not_cut_it(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=600)
    daemon, _ = logged_in(remote, make_tokend)
    # Events 4 s apart on a proxy whose --timeout is 2 s: a stream that sends is not cut by it.
    proxy = mcp_proxy(daemon, remote, workdir, "--timeout", "2")
    try:
        # Gated: the server sends step i+1 only once the agent has step i, so every step crossed the
        # proxy on its own, before the server had sent the next (nothing was held back to the end).
        streaming = start_agent(proxy.url, "slow_stream", arguments={"steps": 3, "gate": "g"})
        try:
            for step in (1, 2, 3):
                assert streaming.next_matching("progress")["progress"] == step
                sent = [e["step"] for e in remote.events("stream_step")]
                assert sent == list(range(1, step + 1)), ("the agent had step", step, "the server had sent", sent)
                if step < 3:
                    remote.release("g", step + 1)
            lines = streaming.finish()
        finally:
            streaming.kill()
        assert results(lines) == ["streamed 3 steps"] and not errors(lines), lines

        said = agent(proxy.url, "slow_stream", arguments={"steps": 3, "interval": 4})
        assert [line["progress"] for line in said if "progress" in line] == [1, 2, 3], said
        assert results(said) == ["streamed 3 steps"] and not errors(said), said
        gaps = [b["time"] - a["time"] for a, b in zip(remote.events("stream_step")[3:], remote.events("stream_step")[4:])]
        assert len(gaps) == 2 and min(gaps) >= 4, gaps  # the stream was silent for twice --timeout, twice
        assert "upstream failed" not in proxy.logs(), proxy.logs()
    finally:
        proxy.stop()


def test_a_silent_stream_is_closed_after_the_stream_idle_timeout(mcp_server, make_tokend, workdir):
    """The bound a stream has instead: silent for longer than --stream-idle-timeout, it is closed, and
    its agent is told (the server's next step finds no one)."""
    remote = mcp_server(access_ttl=600)
    daemon, _ = logged_in(remote, make_tokend)
    proxy = mcp_proxy(daemon, remote, workdir, "--stream-idle-timeout", "1")
    try:
        streaming = start_agent(proxy.url, "slow_stream", arguments={"steps": 2, "gate": "idle"}, timeout=120)
        try:
            assert streaming.next_matching("progress")["progress"] == 1
            wait_for(lambda: "the event stream stayed silent" in proxy.logs(), 30, "the proxy closing the silent stream")
            remote.release("idle", 2)
            lines = streaming.finish()
        finally:
            streaming.kill()
        assert [e["error"] for e in errors(lines)] == ["SSE stream ended without a response"] and not results(lines), lines
    finally:
        proxy.stop()


def test_ten_agents_across_token_lifetimes_cause_one_refresh_per_lifetime(mcp_server, make_tokend, workdir):
    """Ten agents call `count` through one proxy while access tokens live 10 s and every refresh revokes the
    refresh token before it (FastMCP's rotation), across at least three refreshes: every call answered, no
    refresh token refused, refreshes at least half a lifetime apart. A request that carried the token a
    refresh had just revoked met a 401 and was sent again with the new one (no refresh of its own)."""
    ttl = 10
    remote = mcp_server(access_ttl=ttl)
    daemon, first = logged_in(remote, make_tokend, **{"refresh-margin": 3, "min-valid": 2})
    proxy = mcp_proxy(daemon, remote, workdir, "--timeout", "30")
    stop = os.path.join(workdir, "stop-agents")
    agents = [start_agent(proxy.url, "count", until=stop, pause=0.1, timeout=60) for _ in range(10)]
    try:
        # Three refreshes after the agents' first calls: three lifetimes, each with ten agents calling.
        remote.wait_for_event("call", count=10, timeout=120, what="every agent's first call")
        before = len(remote.refreshes())
        remote.wait_for_event("refresh", count=before + 3, timeout=120, what="three refreshes while the agents call")
        open(stop, "w").close()
        said = [each.finish() for each in agents]
    finally:
        for each in agents:
            each.kill()
        proxy.stop()
    done = [lines[-1] for lines in said]
    assert all(d.get("done") and d["errors"] == 0 for d in done), [errors(lines)[:3] for lines in said]
    calls = sum(d["calls"] for d in done)
    assert calls == len(remote.calls("count")) and calls >= 30, (calls, len(remote.calls("count")))
    assert remote.refused_refreshes() == [], remote.refused_refreshes()
    times = [r["time"] for r in remote.refreshes()]
    assert all(b - a >= ttl / 2 for a, b in zip(times, times[1:])), times
    tokens = {c["token"] for c in remote.calls("count")}
    assert fingerprint(first["access_token"]) not in tokens, "tokend's own tokens only (the login's was rotated)"
    assert tokens <= {r["access"] for r in remote.refreshes()}, "every call carried a token tokend's refreshes got"
    # A request carrying a token a refresh had just revoked met a 401, and was sent again with the new one.
    retried = proxy.logs().count("retried after a 401 with a refreshed token")
    assert retried == len(remote.events("access_refused")), (retried, remote.events("access_refused"))
    print(f"\n{calls} calls by 10 agents, {len(times)} refreshes {[round(b - a, 1) for a, b in zip(times, times[1:])]} s "
          f"apart (tokens live {ttl} s), {retried} requests retried after a 401")


def revoke(remote, token, client_id):
    """RFC 7009 at the server: FastMCP revokes the token and its counterpart (an access token's refresh token)."""
    # MCP's revocation handler wants the client_secret field even from a public client (empty then).
    data = urllib.parse.urlencode({"token": token, "client_id": client_id, "client_secret": ""}).encode()
    with urllib.request.urlopen(urllib.request.Request(remote.base + "/revoke", data=data), timeout=20) as answer:
        assert answer.status == 200


def test_a_session_that_needs_a_login_is_said_in_plain_words_without_the_servers_challenge(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=600)
    daemon, _ = logged_in(remote, make_tokend)
    proxy = mcp_proxy(daemon, remote, workdir)
    try:
        assert results(agent(proxy.url, "count")) == [1]
        access = daemon.ctl("token", "--session", "mcp").stdout.strip()
        # The server revokes the access token and its refresh token: the next call meets its 401 and
        # challenge, the proxy's refresh is refused, and the session needs a login.
        revoke(remote, access, daemon.client_id)
        said = agent(proxy.url, "count")
        challenged = remote.events("access_refused")
        assert challenged and challenged[-1]["access"] == fingerprint(access), challenged
        assert remote.refused_refreshes(), "tokend's refresh after the 401 was refused"
        http = [line for line in said if "http" in line]
        assert http and all(line["http"] == 503 and line["www_authenticate"] is None for line in http), said
        assert all("resource_metadata" not in line["body"] and access not in line["body"] for line in http), said
        [error] = errors(said)
        assert "session mcp needs a login" in error["error"] and "tokenctl login --session mcp --browser" in error["error"], said
        assert not results(said)
        body = json.loads(http[0]["body"])
        assert body["jsonrpc"] == "2.0" and body["id"] is None and "tokenctl login --session mcp" in body["error"]["message"]

        # tokend knows now: the next agent is told the same before anything reaches the server.
        calls = len(remote.events("access_refused"))
        again = agent(proxy.url, "count")
        assert "tokenctl login --session mcp --browser" in errors(again)[0]["error"], again
        assert len(remote.events("access_refused")) == calls, "nothing was sent without a token"
        assert "Bearer" not in proxy.logs() and access not in proxy.logs()
    finally:
        proxy.stop()


GET = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\nAccept: application/json, text/event-stream\\r\\n"
          b"Content-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}" % sys.argv[1].encode())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode(errors="replace"))
"""


def as_user(uid, port):
    """A request to the proxy from a process of `uid` (setpriv): the answer as text."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3", "-c", GET,
                           str(port)], capture_output=True, text=True, timeout=60).stdout


def test_peers_own_refuses_another_users_programs_on_tcp(mcp_server, make_tokend, workdir):
    """--peers own on an admin session's proxy: another local user (uid 65534) gets 403 and a log line,
    nothing reaches the server; the proxy's own user is served."""
    remote = mcp_server(access_ttl=600)
    daemon, _ = logged_in(remote, make_tokend)
    proxy = mcp_proxy(daemon, remote, workdir, "--peers", "own")
    try:
        answer = as_user(65534, proxy.port)
        assert answer.startswith("HTTP/1.1 403 "), answer
        assert "refused another user's request" in proxy.logs() and "uid=65534" in proxy.logs(), proxy.logs()
        assert remote.events("access_refused") == [] and remote.calls() == []
        assert results(agent(proxy.url, "count")) == [1]
        assert "any local user can use this proxy" not in proxy.logs()
    finally:
        proxy.stop()
    # Without --peers, an admin session's proxy on TCP serves every local user, as it always has, and says so.
    proxy = mcp_proxy(daemon, remote, workdir)
    try:
        assert "any local user can use this proxy" in proxy.logs()
        wait_for(lambda: "every local user's programs are served" in proxy.logs(), 20, "tokend's status of the session")
        answer = as_user(65534, proxy.port)
        assert not answer.startswith("HTTP/1.1 403 "), answer
    finally:
        proxy.stop()


INITIALIZE = """
import json, socket, sys
port = int(sys.argv[1])
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}).encode()
s = socket.create_connection(("127.0.0.1", port), timeout=60)
s.sendall(b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\nAccept: application/json, text/event-stream\\r\\n"
          b"Content-Type: application/json\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (port, len(body), body))
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode(errors="replace"))
"""


def initialize_as(user, port):
    """MCP's initialize, sent to the proxy by a process of `user` (setpriv; Debian's python, which every user
    may run): the whole answer as text."""
    return subprocess.run(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "/usr/bin/python3",
                           "-c", INITIALIZE, str(port)], capture_output=True, text=True, timeout=120).stdout


def test_the_proxy_of_a_users_session_serves_its_owner_only(mcp_server, make_tokend, workdir):
    """Alice adds the MCP server as her own session, logs in, and runs tokend-proxy for it on a TCP port (any
    local user can connect to one): her programs are served, Bob's and root's get 403, with --peers all too."""
    from test_user_sessions import ALICE, BOB, browser_login, call_as, users_may_add
    remote = mcp_server(access_ttl=600)
    daemon = users_may_add(make_tokend, remote, workdir)
    added = call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    assert "error" not in added, (added, daemon.logs()[-2000:])
    browser_login(ALICE, daemon, "mcp", workdir)
    setpriv = ("setpriv", f"--reuid={ALICE[0]}", f"--regid={ALICE[1]}", "--clear-groups")
    for extra in ((), ("--peers", "all")):
        proxy = ProxyProcess(daemon, remote.base, workdir, "--session", "mcp", "--resource", remote.url, *extra,
                             port=free_port(), prefix=setpriv)
        try:
            assert "the session is a user's" in proxy.logs(), proxy.logs()  # tokend's status said so before it listened
            served = initialize_as(ALICE, proxy.port)
            assert served.startswith("HTTP/1.1 200 ") and "mcp-session-id:" in served.lower(), served
            assert '"serverInfo"' in served and "tokend-test" in served, served
            refused = initialize_as(BOB, proxy.port)
            assert refused.startswith("HTTP/1.1 403 ") and "tokend-proxy serves only the user it runs as" in refused, refused
            assert f"refused another user's request" in proxy.logs() and f"uid={BOB[0]}" in proxy.logs(), proxy.logs()
            # The test's own agent (root, FastMCP's Client) is another user too, told why in a JSON-RPC error.
            said = agent(f"http://127.0.0.1:{proxy.port}/mcp", "count")
            assert [line["http"] for line in said if "http" in line][:1] == [403], said
            assert "tokend-proxy serves only the user it runs as" in errors(said)[0]["error"], said
            assert remote.calls() == [] and remote.events("access_refused") == []
            if extra:
                assert "whatever --peers says" in proxy.logs(), proxy.logs()
        finally:
            proxy.stop()
