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
import subprocess
import sys

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


def users_may_add(make_tokend, remote, workdir, users=(ALICE, BOB)):
    """A tokend whose socket every user reaches, [user-sessions] letting `users` add sessions, plain http to
    loopback allowed (the FastMCP server is on 127.0.0.1); its own session is a placeholder never asked."""
    os.chmod(workdir, 0o755)
    daemon = make_tokend(Placeholder(remote), daemon={"socket-mode": '"0666"'})
    with open(daemon.config) as f:
        text = f.read()
    names = ", ".join(f'"{user[0]}"' for user in users)
    with open(daemon.config, "w") as f:
        # Carol may read tokend.toml's sessions, and add none of her own.
        f.write(f'[access]\nread-users = ["{CAROL[0]}"]\nread-groups = []\n\n'
                f"[user-sessions]\nusers = [{names}]\nallow-loopback-http = true\n\n" + text)
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


def test_a_user_adds_an_mcp_server_from_its_url_and_logs_in_without_root(mcp_server, make_tokend, workdir):
    remote = mcp_server(access_ttl=30)
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
    [whoami] = results(agent(remote.url, "whoami", headers={"Authorization": "Bearer " + access}))
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
    full = f"{ALICE[0]}/mcp"
    for user in (BOB, CAROL):
        listed = call_as(user, daemon, "ListSessions")
        names = [s["session"] for s in listed.get("parameters", {}).get("sessions", [])]
        assert full not in names, listed
        for method, parameters in (("GetToken", {"session": full}), ("GetStatus", {"session": full}),
                                   ("BeginLogin", {"session": full, "flow": "browser"}),
                                   ("RemoveSession", {"session": full}), ("Subscribe", {"session": full})):
            reply = call_as(user, daemon, method, **parameters)
            assert reply.get("error") in (B + "NoSuchSession", "org.varlink.service.PermissionDenied"), (user, method, reply)
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
    remote = mcp_server(access_ttl=30)
    daemon = users_may_add(make_tokend, remote, workdir)
    tokens = {}
    for user in (ALICE, BOB):
        added = call_as(user, daemon, "AddSession", name="mcp", resources=[remote.url])
        assert added["parameters"]["status"]["session"] == f"{user[0]}/mcp", added
        browser_login(user, daemon, "mcp", workdir)
        tokens[user] = token_as(user, daemon, "mcp")
    assert tokens[ALICE] != tokens[BOB]
    clients = {results(agent(remote.url, "whoami", headers={"Authorization": "Bearer " + t}))[0]["client_id"]
               for t in tokens.values()}
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
    assert "error" not in removed, removed
    assert remote.events("revoke"), [line for line in daemon.logs().splitlines() if "revo" in line.lower() or "logout" in line.lower()]
    listed = call_as(ALICE, daemon, "ListSessions")["parameters"]["sessions"]
    assert f"{ALICE[0]}/mcp" not in [s["session"] for s in listed]
    assert not [name for name in os.listdir(daemon.state) if name.startswith(f"@{ALICE[0]}.")]
    assert call_as(ALICE, daemon, "GetToken", session="mcp")["error"] in (B + "NoSuchSession", "org.varlink.service.PermissionDenied")


def test_a_server_that_forgot_the_client_has_it_registered_again_at_the_next_login(mcp_server, make_tokend, workdir):
    """FastMCP keeps registrations in memory: restarted, it answers invalid_client. The session keeps its
    refresh token and says so; the owner's next login registers the client again and succeeds."""
    remote = mcp_server(access_ttl=30)
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
