"""Sessions users add themselves (AddSession, RemoveSession) against FastMCP's own
MCP server and OAuth authorization server (mcp.py: registration, PKCE, rotating
refresh tokens), each call made as the user it names (setpriv): a user adds the
server from its URL alone and logs in through a browser without root; another
user can neither see, use, log in nor remove it; two users each have their own
session of one name; restart and reload keep them; remove revokes."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

from conftest import BIN, wait_for
from mcp import agent, browser_opener, fingerprint, mcp_server, results  # noqa: F401 (mcp_server: fixture)
from test_mcp_fixture import Placeholder

ALICE = (4310, 4310)  # may add sessions
BOB = (4311, 4311)    # may add sessions too
CAROL = (4312, 4312)  # may not
B = "io.tokend.Broker."

ONE_CALL = """import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
call = {"method": sys.argv[2], "parameters": json.loads(sys.argv[3])}
if sys.argv[4:] == ["more"]:
    call["more"] = True
s.sendall(json.dumps(call).encode() + b"\\0")
reply = b""
while not reply.endswith(b"\\0"):
    chunk = s.recv(65536)
    if not chunk:
        break
    reply += chunk
print(reply.split(b"\\0")[0].decode())
"""


def call_as(user, daemon, method, **parameters):
    """One Varlink call on tokend's socket made by `user` (uid, gid): the parsed (first) reply."""
    more = ["more"] if method == "Subscribe" else []
    run = subprocess.run(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "/usr/bin/python3",
                          "-c", ONE_CALL, daemon.socket, B + method, json.dumps(parameters), *more],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    try:
        return json.loads(run.stdout)
    except ValueError:
        raise AssertionError(f"{method}: {run.stdout!r}") from None


def ctl_as(user, daemon, *args, env=None):
    try:
        return subprocess.run(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
                               os.path.join(BIN, "tokenctl"), *args, "--socket", daemon.socket],
                              capture_output=True, text=True, timeout=120, env=env, cwd="/")
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"tokenctl {args[0]} did not end: {expired.stdout!r} {expired.stderr!r} "
                             f"{daemon.logs()[-3000:]}") from None


def users_may_add(make_tokend, remote, workdir, users=(ALICE, BOB), per_person=8, placeholder=None, **session):
    """A tokend whose socket every user reaches, [user-sessions] letting `users` add sessions (`per_person`
    each), plain http to loopback allowed (the FastMCP server is on 127.0.0.1); its own session is a
    placeholder never asked (or `placeholder`'s)."""
    os.chmod(workdir, 0o755)
    daemon = make_tokend(placeholder or Placeholder(remote), daemon={"socket-mode": '"0666"'}, **session)
    with open(daemon.config) as f:
        text = f.read()
    names = ", ".join(f'"{user[0]}"' for user in users)
    with open(daemon.config, "w") as f:
        # Carol may read tokend.toml's sessions, and add none of her own.
        f.write(f'[access]\nread-users = ["{CAROL[0]}"]\nread-groups = []\n\n'
                f"[user-sessions]\nusers = [{names}]\nper-person = {per_person}\nallow-loopback-http = true\n\n" + text)
    return daemon.start()


def browser_login(user, daemon, name, workdir):
    """`tokenctl login --browser` as `user`, through an xdg-open that fetches the page (the server approves at once)."""
    home = os.path.join(workdir, f"home{user[0]}")
    os.makedirs(home, exist_ok=True)
    os.chown(home, *user)
    env = browser_opener(home)
    # The user runs it: Debian's python (the test's own lives under /root, which other users cannot enter).
    opener = os.path.join(home, "bin", "xdg-open")
    with open(opener) as f:
        script = f.read().split("\n", 1)[1]
    with open(opener, "w") as f:
        f.write("#!/usr/bin/python3\n" + script)
    env["HOME"] = home
    env["DISPLAY"] = ":tokend-test"  # tokenctl starts a browser only on a desktop; this xdg-open needs none
    for directory in (home, os.path.join(home, "bin")):
        os.chown(directory, *user)
    login = ctl_as(user, daemon, "login", "--browser", "--session", name, env=env)
    assert login.returncode == 0, (login.stdout, login.stderr, daemon.logs()[-3000:])


def token_as(user, daemon, session):
    reply = call_as(user, daemon, "GetToken", session=session)
    assert "error" not in reply, reply
    return reply["parameters"]["token"]["accessToken"]


# The token a test shows the MCP server itself (an agent process, slow to start on a busy machine) was
# issued at the browser login before it: it lives longer than the test, as it does not rely on expiry.
LONG_TTL = 600


def test_a_user_adds_an_mcp_server_from_its_url_and_logs_in_without_root(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=LONG_TTL)
    daemon = users_may_add(make_tokend, remote, workdir)
    added = call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    assert "error" not in added, (added, daemon.logs()[-2000:])
    out = added["parameters"]
    assert out["registered"] is True and out["issuer"].rstrip("/") == remote.issuer.rstrip("/"), out
    assert out["status"]["session"] == f"{ALICE[0]}/mcp" and out["status"]["owner"] == str(ALICE[0])
    assert out["status"]["state"] == "loginRequired" and out["status"]["resources"] == [remote.url]
    # tokend registered the client at the server, with the loopback redirect URI the login listens at.
    [registration] = remote.registrations()
    assert registration["client_id"] == out["clientId"]
    assert registration["redirect_uris"] == [out["status"]["redirectUri"]]

    browser_login(ALICE, daemon, "mcp", workdir)
    [code] = remote.events("code")
    access = token_as(ALICE, daemon, "mcp")
    assert fingerprint(access) == code["access"]
    said = agent(remote.url, "whoami", headers={"Authorization": "Bearer " + access})
    assert results(said), said  # what the server answered instead (an HTTP status, an error)
    [whoami] = results(said)
    assert (whoami["client_id"], whoami["resource"]) == (out["clientId"], remote.url)
    # Nothing of it in the exported metrics.
    metrics = call_as(ALICE, daemon, "GetMetrics")
    assert "error" in metrics or "/mcp" not in metrics["parameters"]["text"]
    assert "/mcp" not in daemon.ctl("metrics").stdout


def test_another_user_can_neither_see_use_log_in_nor_remove_it(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=30)
    daemon = users_may_add(make_tokend, remote, workdir)
    assert "error" not in call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    browser_login(ALICE, daemon, "mcp", workdir)
    full, none = f"{ALICE[0]}/mcp", f"{ALICE[0]}/none"
    for user in (BOB, CAROL):
        listed = call_as(user, daemon, "ListSessions")
        names = [s["session"] for s in listed.get("parameters", {}).get("sessions", [])]
        assert full not in names, listed
        # The same answer as for a session that does not exist: its existence does not show.
        for method, parameters in (("GetToken", {}), ("GetStatus", {}), ("BeginLogin", {"flow": "browser"}),
                                   ("Logout", {}), ("ResetStrategy", {}), ("GetCookies", {"url": "http://x/"}),
                                   ("RemoveSession", {}), ("Subscribe", {}), ("GetAccess", {})):
            for name in (full, none):
                reply = call_as(user, daemon, method, session=name, **parameters)
                assert reply.get("error") == B + "NoSuchSession", (user, method, name, reply)
        for login in (f"{full}/0123", f"{none}/0123"):
            assert call_as(user, daemon, "CancelLogin", id=login)["error"] in (B + "NoSuchSession", B + "NoSuchLogin")
        # Its bare name is not hers: for another user "mcp" is tokend.toml's, which there is none of.
        assert call_as(user, daemon, "GetToken", session="mcp")["error"] in (B + "NoSuchSession", "org.varlink.service.PermissionDenied")
    # tokend's administrator (root) lists it, with its owner, and gets no token of it.
    listed = daemon.call(B + "ListSessions")[1]["parameters"]["sessions"]
    owners = {s["session"]: s.get("owner") for s in listed}
    assert owners.get(full) == str(ALICE[0]), listed
    assert daemon.call(B + "GetToken", session=full)[1]["error"] == B + "NoSuchSession"
    # Alice's own token is still hers.
    assert token_as(ALICE, daemon, "mcp")


def test_two_users_each_add_a_session_of_one_name_and_each_gets_their_own(mcp_server, make_tokend, workdir):
    # The first user's token is shown to the server after the second user's add and browser login,
    # which on a busy 2-core machine take longer than 30 s: it lives longer than the whole test.
    remote = mcp_server(access_ttl=LONG_TTL)
    daemon = users_may_add(make_tokend, remote, workdir)
    tokens = {}
    for user in (ALICE, BOB):
        added = call_as(user, daemon, "AddSession", name="mcp", resources=[remote.url])
        assert added["parameters"]["status"]["session"] == f"{user[0]}/mcp", added
        browser_login(user, daemon, "mcp", workdir)
        tokens[user] = token_as(user, daemon, "mcp")
    assert tokens[ALICE] != tokens[BOB]
    clients = set()
    for user, token in tokens.items():
        said = agent(remote.url, "whoami", headers={"Authorization": "Bearer " + token})
        assert results(said), (user, said)  # what the server answered instead (an HTTP status, an error)
        clients.add(results(said)[0]["client_id"])
    assert len(clients) == 2, "each was registered as a client of its own"
    again = call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    assert again["error"] == B + "SessionExists", again
    refused = call_as(CAROL, daemon, "AddSession", name="mcp", resources=[remote.url])
    assert refused["error"] == B + "SessionRefused" and "[user-sessions]" in refused["parameters"]["reason"], refused


def test_restart_and_reload_keep_them_and_remove_revokes(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=30)
    daemon = users_may_add(make_tokend, remote, workdir)
    assert "error" not in call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    browser_login(ALICE, daemon, "mcp", workdir)
    before = token_as(ALICE, daemon, "mcp")
    assert daemon.stop() == 0
    daemon.start()
    assert token_as(ALICE, daemon, "mcp") == before, "the session and its token outlive a restart"
    os.kill(daemon.process.pid, signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 20, "the reload")
    assert token_as(ALICE, daemon, "mcp") == before, "and a reload"
    # Remove: revoked at the server, then forgotten; its state file goes too.
    removed = call_as(ALICE, daemon, "RemoveSession", session="mcp")
    assert removed["parameters"] == {"revoked": True}, removed
    assert remote.events("revoke"), [line for line in daemon.logs().splitlines() if "revo" in line.lower() or "logout" in line.lower()]
    listed = call_as(ALICE, daemon, "ListSessions")["parameters"]["sessions"]
    assert f"{ALICE[0]}/mcp" not in [s["session"] for s in listed]
    assert not [name for name in os.listdir(daemon.state) if name.startswith(f"@{ALICE[0]}.")]
    assert call_as(ALICE, daemon, "GetToken", session="mcp")["error"] in (B + "NoSuchSession", "org.varlink.service.PermissionDenied")


def test_a_server_that_forgot_the_client_has_it_registered_again_at_the_next_login(mcp_server, make_tokend, workdir):
    """FastMCP keeps registrations in memory: restarted, it answers invalid_client. The session keeps its
    refresh token and says so; the owner's next login registers the client again and succeeds."""
    remote = mcp_server(access_ttl=LONG_TTL)
    daemon = users_may_add(make_tokend, remote, workdir)
    first = call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])["parameters"]["clientId"]
    browser_login(ALICE, daemon, "mcp", workdir)
    remote.restart()
    refused = call_as(ALICE, daemon, "Refresh", session="mcp", staleGeneration=1)
    assert "error" in refused, refused
    status = call_as(ALICE, daemon, "GetStatus", session="mcp")["parameters"]["status"]
    assert "invalid_client" in (status.get("lastError") or ""), status
    browser_login(ALICE, daemon, "mcp", workdir)
    before, again = remote.registrations()  # one before the restart, one after
    assert before["client_id"] == first != again["client_id"]
    assert again["redirect_uris"] == [status["redirectUri"]], "registered with the same loopback redirect URI"
    access = token_as(ALICE, daemon, "mcp")
    [whoami] = results(agent(remote.url, "whoami", headers={"Authorization": "Bearer " + access}))
    assert whoami["client_id"] == again["client_id"]
    assert "client registered again" in daemon.logs()


def test_concurrent_adds_keep_per_person_and_one_name_once(mcp_server, make_tokend, workdir):
    """per-person = 1 and four adds at once, two of one name: one is added, the others refused; nothing
    half-added is left (one record, one session, one state file)."""
    remote = mcp_server(access_ttl=30)
    daemon = users_may_add(make_tokend, remote, workdir, per_person=1)
    replies = {}

    def add(index, name):
        replies[index] = call_as(ALICE, daemon, "AddSession", name=name, resources=[remote.url])

    threads = [threading.Thread(target=add, args=(i, "same" if i < 2 else f"n{i}")) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    added = [r for r in replies.values() if "error" not in r]
    assert len(added) == 1, replies
    assert sorted(r["error"] for r in replies.values() if "error" in r) in (
        [B + "SessionExists", B + "TooManySessions", B + "TooManySessions"],
        [B + "TooManySessions"] * 3), replies
    listed = [s["session"] for s in call_as(ALICE, daemon, "ListSessions")["parameters"]["sessions"]]
    assert listed == [added[0]["parameters"]["status"]["session"]], listed
    with open(os.path.join(daemon.state, "user-sessions.json")) as f:
        assert [r["clientID"] for r in json.load(f)] == [added[0]["parameters"]["clientId"]]


class HangingToken:
    """A token endpoint that takes connections and never answers: a refresh of tokend.toml's session hangs
    there (until upstream-timeout), and a reload that restarts that session waits for it."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.base = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.token_url = self.base + "/token"
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.connections.append(self.listener.accept()[0])
            except OSError:
                return


def test_a_session_added_while_a_reload_waits_is_its_owners_alone(mcp_server, make_tokend, workdir):
    """A reload that restarts tokend.toml's session waits for its refresh in flight; a user adds a session
    meanwhile. The policy the reload stores has the new session's owner: the owner uses it, a reader of
    tokend.toml's sessions does not see it."""
    remote = mcp_server(access_ttl=30)
    hang = HangingToken()
    daemon = users_may_add(make_tokend, remote, workdir, placeholder=hang, **{"upstream-timeout": 15})
    threading.Thread(target=lambda: daemon.call(B + "Login", session="default", refreshToken="rt"), daemon=True).start()
    wait_for(lambda: hang.connections, 20, "tokend.toml's refresh in flight")
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace("min-valid = 3", "min-valid = 4"))
    os.kill(daemon.process.pid, signal.SIGHUP)
    wait_for(lambda: "reloading" in daemon.logs(), 20, "the reload begun")
    added = call_as(ALICE, daemon, "AddSession", name="late", resources=[remote.url])
    assert "error" not in added, added
    assert "reloaded" not in daemon.logs(), "the add finished while the reload waited"
    wait_for(lambda: "reloaded" in daemon.logs(), 40, "the reload's end")
    full = f"{ALICE[0]}/late"
    assert call_as(ALICE, daemon, "GetStatus", session="late")["parameters"]["status"]["session"] == full
    assert call_as(CAROL, daemon, "GetStatus", session=full)["error"] == B + "NoSuchSession"
    assert full not in [s["session"] for s in call_as(CAROL, daemon, "ListSessions")["parameters"]["sessions"]]


def test_a_reload_applies_new_user_session_rules_to_sessions_already_added(mcp_server, make_tokend, workdir):
    """allow-loopback-http turned off and reloaded: the session already added no longer reaches the loopback
    server (its refresh is refused by the outbound rules, the server sees none); a new add is refused too."""
    remote = mcp_server(access_ttl=30)
    daemon = users_may_add(make_tokend, remote, workdir)
    assert "error" not in call_as(ALICE, daemon, "AddSession", name="mcp", resources=[remote.url])
    browser_login(ALICE, daemon, "mcp", workdir)
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace("allow-loopback-http = true", "allow-loopback-http = false"))
    os.kill(daemon.process.pid, signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 20, "the reload")
    refused = call_as(ALICE, daemon, "Refresh", session="mcp", staleGeneration=1)
    assert "error" in refused, refused
    status = call_as(ALICE, daemon, "GetStatus", session="mcp")["parameters"]["status"]
    assert "loopback" in (status.get("lastError") or ""), status
    assert remote.refreshes() == [], "the server saw no refresh"
    assert call_as(ALICE, daemon, "AddSession", name="two", resources=[remote.url])["error"] == B + "AddressRefused"
