"""A person's own session, through tokenctl (issue 51): a user who is not root adds
a remote MCP server from its URL alone (FastMCP's own OAuth server: discovery and
dynamic registration), logs it in through the browser without root, gets a token
the server takes, sees that it is theirs, and removes it: the server's events show
the revocation; `tokenctl proxy` prints the URL an agent uses, served at once; the Python client
makes the same calls. And what tokenctl says when tokend refuses an add, with the fix."""
import json
import os
import re
import subprocess
import types

import pytest

from conftest import BIN, ROOT, Tokend, free_port
from mcp import agent, browser_opener, mcp_server, results  # noqa: F401 (mcp_server is a fixture)

TOKENCTL = os.path.join(BIN, "tokenctl")
NOBODY = 65534  # a user with a name and no rights: the owner here


def as_user(uid, *args, env=None, timeout=60):
    """tokenctl run as `uid` (its own group, no others), as a person without root would."""
    command = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", TOKENCTL, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def user_tokend(workdir, remote, users=(NOBODY,), loopback=True):
    """A tokend any local user can reach (socket 0666), whose [user-sessions] lets `users` add
    sessions; plain http to loopback (the MCP server's) only with `loopback`."""
    os.chmod(workdir, 0o755)
    # tokend.toml's own session is not used here: it points at the MCP server's token endpoint.
    upstream = types.SimpleNamespace(token_url=remote.token_endpoint if remote else "https://idp.invalid/token",
                                     base=remote.base if remote else "https://idp.invalid")
    daemon = Tokend(workdir, upstream, daemon={"socket-mode": '"0666"'})
    with open(daemon.config, "a") as f:
        f.write("[user-sessions]\nusers = [%s]\nallow-loopback-http = %s\n"
                % (", ".join(f'"{u}"' for u in users), "true" if loopback else "false"))
    return daemon.start()


def users_browser(workdir, daemon):
    """The environment for `tokenctl login --browser` run as another user: mcp.py's opener, which
    fetches the URL it is given, run by the system's Python (it needs only the standard library; the
    test's venv may lie where another user cannot run it, under /root), noting each URL in WORKDIR/opened."""
    env = {**browser_opener(workdir), "TOKEND_SOCKET": daemon.socket}
    opener = os.path.join(workdir, "bin", "xdg-open")
    with open(opener) as f:
        script = f.read().split("\n", 1)[1]
    with open(opener, "w") as f:
        f.write("#!/usr/bin/python3\n" + script)
    opened = os.path.join(workdir, "opened")
    open(opened, "w").close()
    os.chmod(opened, 0o666)
    return env


@pytest.fixture
def started():
    daemons = []
    yield daemons.append
    for daemon in daemons:
        daemon.stop()


def test_a_user_adds_an_mcp_server_from_its_url_logs_in_without_root_and_removes_it(mcp_server, workdir, started):
    remote = mcp_server(access_ttl=120)
    daemon = user_tokend(workdir, remote)
    started(daemon)
    socket = ["--socket", daemon.socket]

    added = as_user(NOBODY, "add", "mcp", "--resource", remote.url, *socket)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added session nobody/mcp, yours (nobody's); mcp names it\n"), added.stdout
    assert f"authorization server  {remote.issuer}" in added.stdout
    [registration] = remote.registrations()
    assert f"client                {registration['client_id']}, registered by tokend (RFC 7591)" in added.stdout
    assert f"resources             {remote.url}" in added.stdout
    assert "Next, log it in:  tokenctl login --session mcp --browser" in added.stdout
    # The client was registered with the loopback redirect URI the login listens at.
    status = json.loads(as_user(NOBODY, "status", "--session", "mcp", "--json", *socket).stdout)
    assert status["owner"] == "nobody" and status["session"] == "nobody/mcp" and status["state"] == "loginRequired"
    assert registration["redirect_uris"] == [status["redirectUri"]], (registration, status)
    advice = as_user(NOBODY, "status", "--session", "mcp", *socket)
    assert advice.returncode == 2 and "Run: tokenctl login --session nobody/mcp --browser" in advice.stdout, advice.stdout

    # The browser login, as the user, through an xdg-open that fetches what it is given.
    login = as_user(NOBODY, "login", "--session", "mcp", "--browser", env=users_browser(workdir, daemon), timeout=120)
    assert login.returncode == 0, (login.stdout, login.stderr)
    assert "Logged in." in login.stderr
    with open(os.path.join(workdir, "opened")) as f:
        assert f.read().startswith(status["redirectUri"].rsplit("/", 1)[0] + "/start/"), "the browser went to tokenctl's listener"
    [code] = remote.events("code")
    assert code["client_id"] == registration["client_id"] and code["resource"] == remote.url

    # What the user received: a token the MCP server takes, issued to tokend's client for this resource.
    token = json.loads(as_user(NOBODY, "token", "--session", "mcp", "--json", *socket).stdout)
    full = json.loads(as_user(NOBODY, "token", "--session", "nobody/mcp", "--json", *socket).stdout)
    assert full["accessToken"] == token["accessToken"], "the full name is the same session"
    [whoami] = results(agent(remote.url, "whoami", headers={"Authorization": f"Bearer {token['accessToken']}"}))
    assert whoami["client_id"] == registration["client_id"] and whoami["resource"] == remote.url, whoami

    listed = as_user(NOBODY, "sessions", *socket)
    assert re.search(r"^nobody/mcp\tactive\t.*\towner nobody$", listed.stdout, re.M), listed.stdout
    assert "nobody's own session" in as_user(NOBODY, "status", "--session", "mcp", *socket).stdout
    mine = [json.loads(line) for line in daemon.ctl("sessions", "--json").stdout.splitlines()]
    assert {"session": "nobody/mcp", "owner": "nobody"}.items() <= next(
        s for s in mine if s["session"] == "nobody/mcp").items(), "root lists it, with its owner"

    again = as_user(NOBODY, "add", "mcp", "--resource", remote.url, *socket)
    assert again.returncode == 1 and "you already have a session named nobody/mcp" in again.stderr
    assert "`tokenctl remove mcp` first" in again.stderr

    removed = as_user(NOBODY, "remove", "mcp", *socket)
    assert removed.returncode == 0 and "revoked" in removed.stdout, removed.stderr
    revoked = remote.wait_for_event("revoke", what="the revocation of the session's tokens")
    assert revoked[0]["client_id"] == registration["client_id"]
    # Gone: no token, and not listed (a bare name then means the administrator's, of which this user
    # may read none here).
    gone = as_user(NOBODY, "token", "--session", "mcp", *socket)
    assert gone.returncode in (5, 6) and gone.stdout == "", gone.stderr
    assert "nobody/mcp" not in daemon.ctl("sessions").stdout
    again = as_user(NOBODY, "remove", "mcp", *socket)
    assert again.returncode == 5 and "you have added none" in again.stderr, again.stderr


def test_a_refused_add_says_why_and_the_fix(mcp_server, workdir, started):
    remote = mcp_server()
    daemon = user_tokend(workdir, remote, loopback=False)
    started(daemon)
    socket = ["--socket", daemon.socket]
    # Plain http to this host, which the administrator has not allowed.
    refused = as_user(NOBODY, "add", "mcp", "--resource", remote.url, *socket)
    assert refused.returncode == 6, refused.stderr
    assert f"tokend does not connect to {remote.url} for a user" in refused.stderr
    assert "allow-loopback-http" in refused.stderr and remote.registrations() == []
    # A user [user-sessions] does not name.
    other = as_user(65533, "add", "mcp", "--resource", "https://mcp.example.com/mcp", *socket)
    assert other.returncode == 6 and "[user-sessions]" in other.stderr, other.stderr
    assert as_user(NOBODY, "sessions", *socket).stdout.strip() == "", "nothing half-added is left"


def test_discovery_names_the_step_and_adds_are_bounded_per_person(workdir, started):
    daemon = user_tokend(workdir, None)
    started(daemon)
    nothing = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    for attempt in range(5):
        failed = as_user(NOBODY, "add", f"m{attempt}", "--resource", nothing, "--socket", daemon.socket)
        assert failed.returncode == 1, failed.stderr
        assert f"discovery failed at its challenge step: {nothing} gave no answer" in failed.stderr, failed.stderr
        assert "Nothing answered there" in failed.stderr and "--issuer URL" in failed.stderr
    limited = as_user(NOBODY, "add", "m5", "--resource", nothing, "--socket", daemon.socket)
    assert limited.returncode == 7, limited.stderr
    assert "you added sessions faster than one person may" in limited.stderr
    assert re.search(r"the next add is allowed in \d+ s", limited.stderr), limited.stderr


def test_proxy_prints_the_url_an_agent_uses_and_serves_the_owner_there(mcp_server, workdir, started):
    remote = mcp_server(access_ttl=120)
    daemon = user_tokend(workdir, remote)
    started(daemon)
    assert as_user(NOBODY, "add", "mcp", "--resource", remote.url, "--socket", daemon.socket).returncode == 0
    login = as_user(NOBODY, "login", "--session", "mcp", "--browser", env=users_browser(workdir, daemon), timeout=120)
    assert login.returncode == 0, login.stderr

    # No --listen: tokenctl picks the port and hands the socket over, so the URL it prints is served.
    proxy = subprocess.Popen(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", TOKENCTL,
                              "proxy", "mcp", "--socket", daemon.socket],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = proxy.stdout.readline()
        found = re.fullmatch(r"session nobody/mcp: an agent uses (http://127\.0\.0\.1:\d+/mcp)\n", first)
        assert found, (first, proxy.stderr.read() if proxy.poll() is not None else "")
        initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
        # The owner's request: curl as the user, with no token of its own; the proxy adds the session's.
        # The port listened before the URL was printed: nothing to wait for.
        answer = subprocess.run(
            ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "curl", "-sS",
             "-o", "-", "-w", "\n%{http_code}",
             "-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
             "--data", initialize, found.group(1)], capture_output=True, text=True, timeout=60)
        assert answer.stdout.endswith("\n200") and '"serverInfo"' in answer.stdout, (answer.stdout, answer.stderr)
        assert remote.events("access_refused") == []
    finally:
        proxy.kill()
        proxy.communicate(timeout=20)


def test_the_python_client_adds_and_removes_a_session_and_names_the_failed_step(mcp_server, workdir, started):
    """The Python client (standard library only: the system's Python, as the user) makes the same calls."""
    remote = mcp_server()
    daemon = user_tokend(workdir, remote)
    started(daemon)
    nothing = f"http://127.0.0.1:{free_port()}/mcp"
    script = f"""
import json
from tokend_client import Tokend, DiscoveryFailed, SessionExists
tokend = Tokend({daemon.socket!r})
added = tokend.add_session("mcp", resources=[{remote.url!r}])
out = {{"issuer": added.issuer, "client": added.client_id, "registered": added.registered,
        "owner": added.status.get("owner"), "session": added.status["session"]}}
try:
    tokend.add_session("mcp", resources=[{remote.url!r}])
except SessionExists as error:
    out["exists"] = error.parameters["session"]
try:
    tokend.add_session("other", resources=[{nothing!r}])
except DiscoveryFailed as error:
    out["failed"] = [error.step, error.url, error.status]
tokend.remove_session("mcp")
out["left"] = [s["session"] for s in tokend.call("ListSessions")["sessions"]]
print(json.dumps(out))
"""
    run = subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                          "/usr/bin/python3", "-c", script], capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ["PATH"], "PYTHONPATH": os.path.join(ROOT, "clients", "python")})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    [registration] = remote.registrations()
    assert out["issuer"] == remote.issuer and out["client"] == registration["client_id"] and out["registered"]
    assert out["owner"] == "nobody" and out["session"] == "nobody/mcp" and out["exists"] == "nobody/mcp"
    assert out["failed"] == ["challenge", nothing, None]
    assert "nobody/mcp" not in out["left"]
