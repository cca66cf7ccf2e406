"""A remote MCP server with its own OAuth authorization server, and agents that
call it: code nobody here wrote (PyPI fastmcp and mcp, Tests/mcpserver).

    def test_something(mcp_server, make_tokend, server, workdir):
        remote = mcp_server(access_ttl=8)       # started, on a port of its own
        remote.url, remote.issuer               # http://127.0.0.1:P/mcp, http://127.0.0.1:P/
        client = remote.register(["http://127.0.0.1:Q/callback"])
        ...
        remote.wait_for_event("refresh", what="tokend's refresh")
        assert remote.refused_refreshes() == []
        calls = agent(proxy_url, "count", repeat=3)

The server (Tests/mcpserver/server.py) is FastMCP's own, with its in-memory OAuth
provider: registration (RFC 7591) of any client, an authorization endpoint that
approves at once (no login page, no consent: the browser is redirected straight to
the redirect URI with the code), PKCE S256, and refresh tokens that rotate, each
refresh revoking the previous refresh token and its access token. What its
provider does is logged, tokens by fingerprint(): see events()."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

import pytest

from conftest import ROOT, wait_for
from ports import free_port

SERVER = os.path.join(ROOT, "Tests", "mcpserver", "server.py")
AGENT = os.path.join(ROOT, "Tests", "mcpserver", "agent.py")


def fingerprint(token: str) -> str:
    """How events.jsonl names a token (the server logs no token in full)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class MCPServer:
    """Tests/mcpserver/server.py in `directory` on a port of its own.
    access_ttl: the access tokens' lifetime (s); refresh_ttl: the refresh tokens'
    (None: no expiry, FastMCP's default); rotation: revoke (FastMCP's own), reuse
    (the same refresh token answered again) or omit (no refresh_token answered)."""

    def __init__(self, directory: str, access_ttl: int = 8, refresh_ttl: int | None = None,
                 rotation: str = "revoke", port: int | None = None) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.port = port or free_port()
        self.access_ttl, self.refresh_ttl, self.rotation = access_ttl, refresh_ttl, rotation
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> MCPServer:
        ready = os.path.join(self.directory, "ready")
        if os.path.exists(ready):
            os.unlink(ready)
        extra = ["--refresh-ttl", str(self.refresh_ttl)] if self.refresh_ttl else []
        self.process = subprocess.Popen(
            [sys.executable, SERVER, self.directory, str(self.port), "--access-ttl", str(self.access_ttl),
             "--rotation", self.rotation, *extra],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.directory, "server.log"), "a"),
            start_new_session=True)
        wait_for(self._ready, 60, "the MCP server")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the MCP server exited with {self.process.returncode}: {self.logs()[-3000:]}")
        return os.path.exists(os.path.join(self.directory, "ready"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def restart(self) -> MCPServer:
        """The same port, everything in memory forgotten: clients, codes, tokens."""
        self.stop()
        return self.start()

    def logs(self) -> str:
        with open(os.path.join(self.directory, "server.log")) as f:
            return f.read()

    # Where things are.
    @property
    def url(self) -> str:
        """The MCP endpoint (streamable HTTP), the protected resource."""
        return self.base + "/mcp"

    @property
    def issuer(self) -> str:
        """The issuer exactly as the server's metadata says it: FastMCP's ends in "/"."""
        return self.base + "/"

    @property
    def resource_metadata_url(self) -> str:
        return self.base + "/.well-known/oauth-protected-resource/mcp"

    @property
    def registration_endpoint(self) -> str:
        return self.base + "/register"

    @property
    def token_endpoint(self) -> str:
        return self.base + "/token"

    # What happened.
    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Everything the provider and the tools did, in order (Tests/mcpserver/server.py lists the kinds)."""
        path = os.path.join(self.directory, "events.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.endswith("\n")]
        return [e for e in lines if kind is None or e["event"] == kind]

    def refreshes(self) -> list[dict[str, Any]]:
        """Refreshes answered: old, refresh (the new refresh token), access, expires_in, time."""
        return self.events("refresh")

    def refused_refreshes(self) -> list[dict[str, Any]]:
        """Refresh tokens refused: refresh, reason (rotated, revoked, expired, expired_access, unknown)."""
        return self.events("refresh_refused")

    def registrations(self) -> list[dict[str, Any]]:
        return self.events("register")

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events("call") if tool is None or e["tool"] == tool]

    def wait_for_event(self, kind: str, predicate: Callable[[dict[str, Any]], bool] = lambda e: True,
                       count: int = 1, timeout: float = 60, what: str | None = None) -> list[dict[str, Any]]:
        """Waits until `count` events of `kind` satisfy `predicate`; returns them all."""
        def found() -> list[dict[str, Any]] | None:
            matching = [e for e in self.events(kind) if predicate(e)]
            return matching if len(matching) >= count else None
        return wait_for(found, timeout, what or f"{count} {kind} event(s) from the MCP server")

    def release(self, gate: str, step: int) -> None:
        """Lets slow_stream(gate=GATE) send step `step`."""
        with open(os.path.join(self.directory, f"gate-{gate}-{step}"), "w"):
            pass

    # Acting as a client would.
    def register(self, redirect_uris: list[str], **metadata: Any) -> dict[str, Any]:
        """RFC 7591: a public client (token_endpoint_auth_method none) unless `metadata` says otherwise."""
        body = {"redirect_uris": redirect_uris, "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                "client_name": "tokend test", **metadata}
        request = urllib.request.Request(self.registration_endpoint, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=20) as response:
            assert response.status == 201, response.status
            return json.loads(response.read())

    def authorize(self, client_id: str, redirect_uri: str, resource: str | None = None) -> dict[str, Any]:
        """A whole authorization-code login with PKCE, without tokend: the token response."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "state": "s",
                 "code_challenge": challenge, "code_challenge_method": "S256"}
        if resource:
            query["resource"] = resource
        try:
            urllib.request.build_opener(NoRedirects).open(
                self.base + "/authorize?" + urllib.parse.urlencode(query), timeout=20)
            raise AssertionError("the authorization endpoint did not redirect")
        except urllib.error.HTTPError as redirect:
            assert redirect.code in (302, 303, 307), (redirect.code, redirect.read())
            location = redirect.headers["Location"]
        code = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)["code"][0]
        fields = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                  "client_id": client_id, "code_verifier": verifier}
        if resource:
            fields["resource"] = resource
        return self.token(**fields)[1]

    def token(self, **fields: str) -> tuple[int, dict[str, Any]]:
        """A raw token request: (status, body)."""
        request = urllib.request.Request(self.token_endpoint, data=urllib.parse.urlencode(fields).encode())
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def browser_opener(self, workdir: str) -> dict[str, str]:
        """An `xdg-open` in WORKDIR/bin that fetches the URL it is given, following redirects (the
        authorization endpoint approves at once and redirects to tokenctl's loopback callback), so
        `tokenctl login --browser` completes without a person. Returns the environment to run
        tokenctl with: that directory first on PATH, and WAYLAND_DISPLAY set when no display is
        (tokenctl starts a browser only on a desktop). Every URL opened is appended to WORKDIR/opened."""
        return browser_opener(workdir)


def browser_opener(workdir: str) -> dict[str, str]:
    """See MCPServer.browser_opener; needs no server."""
    directory = os.path.join(workdir, "bin")
    os.makedirs(directory, exist_ok=True)
    opener = os.path.join(directory, "xdg-open")
    log = os.path.join(workdir, "opened")
    script = f"""#!{sys.executable}
# tokenctl starts this as the desktop's browser: it fetches the page as a browser would, redirects followed.
import sys, urllib.request
with open({log!r}, "a") as f:
    f.write(sys.argv[1] + "\\n")
with urllib.request.urlopen(sys.argv[1], timeout=60) as page:
    page.read()
"""
    with open(opener, "w") as f:
        f.write(script)
    os.chmod(opener, 0o755)
    env = {**os.environ, "PATH": directory + os.pathsep + os.environ.get("PATH", "")}
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env["WAYLAND_DISPLAY"] = "tokend-test-no-display"  # only read as "a desktop is here"
    return env


def agent_command(url: str, tool: str, arguments: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                  repeat: int = 1, until: str | None = None, pause: float = 0.0, fresh: bool = False,
                  timeout: float = 120.0) -> list[str]:
    command = [sys.executable, AGENT, url, tool, "--arguments", json.dumps(arguments or {}),
               "--repeat", str(repeat), "--pause", str(pause), "--timeout", str(timeout)]
    for name, value in (headers or {}).items():
        command += ["--header", f"{name}: {value}"]
    if until:
        command += ["--until", until]
    if fresh:
        command.append("--fresh")
    return command


class Agent:
    """An agent started in the background (start_agent): read what it said as it arrives."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[dict[str, Any]] = []

    def next(self) -> dict[str, Any]:
        """The next line the agent writes (blocks until it does)."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the agent ended: {self.process.stderr.read() if self.process.stderr else ''}"
        self.lines.append(json.loads(line))
        return self.lines[-1]

    def next_matching(self, key: str) -> dict[str, Any]:
        while True:
            line = self.next()
            if key in line:
                return line

    def finish(self, timeout: float = 300) -> list[dict[str, Any]]:
        out, err = self.process.communicate(timeout=timeout)
        self.lines += [json.loads(line) for line in out.splitlines() if line.strip()]
        self.stderr = err
        return self.lines

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=20)


def start_agent(url: str, tool: str, env: dict[str, str] | None = None, **options: Any) -> Agent:
    """FastMCP's Client in a process of its own, with no OAuth configured: calls `tool` at `url`
    (a tokend-proxy's, or the server's with headers={"Authorization": "Bearer ..."}).
    Options: arguments, headers, repeat, until (a file: call until it exists), pause, fresh, timeout."""
    return Agent(agent_command(url, tool, **options), env)


def agent(url: str, tool: str, env: dict[str, str] | None = None, **options: Any) -> list[dict[str, Any]]:
    """start_agent, waited for: every line it wrote (progress, log, result, error, and done last)."""
    return start_agent(url, tool, env, **options).finish()


def results(lines: list[dict[str, Any]]) -> list[Any]:
    return [line["result"] for line in lines if "result" in line]


def errors(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "error" in line]


@pytest.fixture
def mcp_server(workdir: str):
    """A factory: mcp_server(access_ttl=8, refresh_ttl=None, rotation="revoke") starts one more
    MCP server (its directory under the test's workdir, a port of its own); all stop after the test."""
    started: list[MCPServer] = []

    def make(**options: Any) -> MCPServer:
        instance = MCPServer(os.path.join(workdir, f"mcp{len(started)}"), **options)
        started.append(instance)
        return instance

    yield make
    for instance in started:
        instance.stop()
