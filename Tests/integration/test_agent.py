# Over 90 s of `make test` (docs/testing.md): a new session is seen at the agent's next list of sessions,
# which it asks for once a minute (60 s of the 103 s summed on the busy 2-core machine); a browser completes
# the sign-ins.
"""`tokenctl agent` (issue 45) against the built tokend and the real
authorization server, on a private D-Bus session bus with python3-dbusmock's
notification daemon and a portal of the tests' own (agent_portal.py). The
sign-in the agent starts is completed as a person would: the URL the portal
was asked to open, in a real headless Chromium, through the provider's pages."""
import json
import os
import signal
import sqlite3
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from conftest import BIN, CLIENT_ID, login, open_to_other_users, varlink_call, wait_for
from sessionbus import HERE, NOTIFICATIONS, PORTAL, SessionBus
from test_login import authorization_url, browser, finish, login_sessions, oidc_server, start_login  # noqa: F401 (fixtures)

B = "io.tokend.Broker."
# nobody: dbus-daemon drops a connection whose uid has no account (it looks up its groups).
READER = 65534


@pytest.fixture
def bus(workdir) -> Iterator[SessionBus]:
    instance = SessionBus(workdir)
    instance.mock("notification_daemon", NOTIFICATIONS[0])
    instance.mock(os.path.join(HERE, "agent_portal.py"), PORTAL[0])
    yield instance
    instance.stop()


class Agent:
    """`tokenctl agent` on the test's bus, its messages in a file."""

    def __init__(self, daemon, bus: SessionBus, prefix=(), env=None) -> None:
        self.log_path = os.path.join(daemon.directory, f"agent-{len(os.listdir(daemon.directory))}.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [*prefix, os.path.join(BIN, "tokenctl"), "agent", "--socket", daemon.socket, "--config", daemon.config],
            env=env or bus.env(), stdout=self.log, stderr=self.log)

    def said(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_said(self, text: str, what: str) -> None:
        def found():
            if self.process.poll() is not None:
                raise AssertionError(f"the agent exited with {self.process.returncode}: {self.said()}")
            return text in self.said()
        wait_for(found, 30, what)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def status(daemon, session: str) -> dict:
    reply = varlink_call(daemon.socket, B + "GetStatus", {"session": session})[1]
    return reply["parameters"]["status"]


def notifications(bus: SessionBus) -> list[dict]:
    """Each Notify the notification server had: summary, body, actions, hints."""
    return [{"summary": args[3], "body": args[4], "actions": args[5], "hints": args[6]}
            for args in bus.calls(NOTIFICATIONS, "Notify")]


def refresh_fails(daemon, session: str) -> None:
    """A client asks for a new token, as any would, and tokend finds the grant gone."""
    generation = status(daemon, session)["generation"]
    reply = varlink_call(daemon.socket, B + "Refresh", {"session": session, "staleGeneration": generation})[1]
    assert reply.get("error") == B + "LoginRequired", reply
    assert status(daemon, session)["state"] == "loginRequired"


def revoke_at_provider(server, daemon, session: str, client_id: str) -> None:
    """The provider revokes the session's grant: the refresh token that came with its current access token."""
    token = varlink_call(daemon.socket, B + "GetToken", {"session": session})[1]["parameters"]["token"]["accessToken"]
    db = sqlite3.connect(os.path.join(server.directory, "db.sqlite3"))
    rows = db.execute("select r.token from oauth2_provider_refreshtoken r join oauth2_provider_accesstoken a "
                      "on r.access_token_id = a.id where a.token = ?", (token,)).fetchall()
    assert len(rows) == 1, rows
    if client_id == CLIENT_ID:  # a confidential client authenticates
        assert server.post("/o/revoke_token/", token=rows[0][0], token_type_hint="refresh_token")[0] == 200
        return
    body = urllib.parse.urlencode({"token": rows[0][0], "token_type_hint": "refresh_token", "client_id": client_id})
    with urllib.request.urlopen(server.base + "/o/revoke_token/", data=body.encode(), timeout=10) as response:
        assert response.status == 200


def test_one_notification_per_episode_its_sign_in_through_the_portal_and_closed_when_active(
        oidc_server, make_tokend, browser, bus, agents):
    daemon = make_tokend(oidc_server, sessions={"web": login_sessions(oidc_server)["web"]}).start()
    login(daemon, oidc_server)  # "default": the second session, which must stay untouched
    process, start, _ = start_login(daemon, "browser", "web")
    assert "Logged in" in browser.authorize(start)
    assert finish(process)[0] == 0
    assert status(daemon, "web")["state"] == "active" and status(daemon, "default")["state"] == "active"

    agent = Agent(daemon, bus)
    agents.append(agent)
    agent.wait_said("watching default, web", "the agent watching both sessions")
    assert "notifications go to mock-notify 1.0" in agent.said()
    assert notifications(bus) == [], "nothing is posted while all is well"

    revoke_at_provider(oidc_server, daemon, "web", "tokend-browser")
    refresh_fails(daemon, "web")
    wait_for(lambda: notifications(bus), 20, "the notification")
    [posted] = notifications(bus)
    assert posted["summary"] == "Sign-in needed: web"
    assert "invalid_grant" in posted["body"], posted
    assert posted["actions"] == ["sign-in", "Sign in"]
    assert posted["hints"]["resident"]["data"] is True
    agent.wait_said("session web needs a login: notification 1", "the agent's word on it")
    assert status(daemon, "default")["state"] == "active", "the second session is untouched"

    bus.emit(NOTIFICATIONS, NOTIFICATIONS[0], "ActionInvoked", "us", "1", "sign-in")
    wait_for(lambda: bus.calls(PORTAL, "OpenURI"), 20, "the portal asked to open the sign-in page")
    [(parent, url, options)] = bus.calls(PORTAL, "OpenURI")
    assert url.startswith("http://127.0.0.1:") and "/start/" in url and "state=" not in url, url
    assert status(daemon, "web")["pendingLogins"] == 1, "the login the user chose, begun as tokenctl login --browser does"

    # The person refuses at the provider: that login ends, the episode does not, and no second notification comes.
    page = browser.authorize(url, accept=False)
    assert "Login failed" in page and "access_denied" in page, page
    agent.wait_said("session web: the sign-in did not finish", "the refused sign-in")
    assert status(daemon, "web")["state"] == "loginRequired" and status(daemon, "web")["pendingLogins"] == 0

    # The notification stayed (resident): Sign in again, and this time approve.
    bus.emit(NOTIFICATIONS, NOTIFICATIONS[0], "ActionInvoked", "us", "1", "sign-in")
    wait_for(lambda: len(bus.calls(PORTAL, "OpenURI")) == 2, 20, "the second sign-in page")
    second = bus.calls(PORTAL, "OpenURI")[1][1]
    assert second != url and "/start/" in second, "a new login"
    page = browser.authorize(second)
    assert "Logged in" in page and "alice" in page, page
    wait_for(lambda: bus.calls(NOTIFICATIONS, "CloseNotification"), 20, "the notification closed")
    assert bus.calls(NOTIFICATIONS, "CloseNotification") == [[1]]
    assert status(daemon, "web")["state"] == "active"
    assert [n["summary"] for n in notifications(bus)] == ["Sign-in needed: web"], "one notification for the episode"


def test_a_session_that_needs_a_login_when_the_agent_starts_is_announced(server, make_tokend, bus, agents):
    daemon = make_tokend(server).start()  # never logged in
    agent = Agent(daemon, bus)
    agents.append(agent)
    agent.wait_said("watching default", "the agent watching")
    [posted] = notifications(bus)
    assert posted["summary"] == "Sign-in needed: default" and posted["actions"] == ["sign-in", "Sign in"]
    assert "Not logged in yet" in posted["body"], "why, in tokend's words"
    # The unit and the autostart entry may both start one: the second ends at once, posting nothing.
    second = subprocess.run([os.path.join(BIN, "tokenctl"), "agent", "--socket", daemon.socket], env=bus.env(),
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 0 and "another tokenctl agent runs on this session bus" in second.stderr, second
    assert len(notifications(bus)) == 1
    # This session has no browser login (a token endpoint only): Sign in says so where the user clicked.
    bus.emit(NOTIFICATIONS, NOTIFICATIONS[0], "ActionInvoked", "us", "1", "sign-in")
    wait_for(lambda: len(bus.calls(NOTIFICATIONS, "Notify")) == 2, 20, "the notification replaced")
    replaced = bus.calls(NOTIFICATIONS, "Notify")[1]
    assert replaced[1] == 1 and replaced[5] == [], "the same notification, now without the action"
    assert "Signing in from here did not begin" in replaced[4] and "tokenctl login --device" in replaced[4], replaced
    assert bus.calls(PORTAL, "OpenURI") == [] and status(daemon, "default")["pendingLogins"] == 0
    # Stopped with the desktop session: no Sign in button is left that nobody listens to.
    agent.process.terminate()
    assert agent.process.wait(20) == 0, agent.said()
    assert bus.calls(NOTIFICATIONS, "CloseNotification") == [[1]]


def test_a_reader_who_may_not_log_in_is_told_who_may_and_gets_no_action(server, make_tokend, workdir, bus, agents):
    daemon = open_to_other_users(make_tokend, server, workdir, f'read-users = ["{READER}"]')
    agent = Agent(daemon, bus, prefix=["setpriv", f"--reuid={READER}", f"--regid={READER}", "--clear-groups"])
    agents.append(agent)
    agent.wait_said("watching default", "the reader's agent watching")
    assert notifications(bus) == []
    revoke_at_provider(server, daemon, "default", "tokend-test")
    refresh_fails(daemon, "default")
    wait_for(lambda: notifications(bus), 20, "the reader's notification")
    [posted] = notifications(bus)
    assert posted["actions"] == [], "no Sign in for a user tokend would refuse"
    assert "resident" not in posted["hints"]
    assert "Only root can sign it in: ask them to run tokenctl login." in posted["body"], posted
    assert bus.calls(PORTAL, "OpenURI") == []


def test_without_a_session_bus_it_says_so_and_exits_non_zero(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env["XDG_RUNTIME_DIR"] = workdir  # no bus socket there
    result = subprocess.run([os.path.join(BIN, "tokenctl"), "agent", "--socket", daemon.socket], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("tokenctl agent: no desktop session bus"), result.stderr
    assert "DBUS_SESSION_BUS_ADDRESS" in result.stderr and "systemctl --user start tokend-agent" in result.stderr
    assert json.loads(daemon.ctl("status", "--json").stdout)["state"] == "loginRequired", "nothing changed in tokend"


def test_without_a_portal_the_page_opens_with_xdg_open(oidc_server, make_tokend, workdir, agents):
    """No portal on the bus (ServiceUnknown): xdg-open starts the user's $BROWSER, here one that writes down
    the URL it is given."""
    bus = SessionBus(workdir)
    try:
        bus.mock("notification_daemon", NOTIFICATIONS[0])
        opened = os.path.join(workdir, "opened")
        recorder = os.path.join(workdir, "browser")
        with open(recorder, "w") as f:
            f.write(f'#!/bin/sh\necho "$1" >> {opened}\n')
        os.chmod(recorder, 0o755)
        daemon = make_tokend(oidc_server, sessions={"web": login_sessions(oidc_server)["web"]}).start()
        login(daemon, oidc_server)
        agent = Agent(daemon, bus, env=bus.env(BROWSER=recorder))
        agents.append(agent)
        agent.wait_said("watching default, web", "the agent")
        [posted] = notifications(bus)  # web was never logged in
        assert posted["summary"] == "Sign-in needed: web"
        bus.emit(NOTIFICATIONS, NOTIFICATIONS[0], "ActionInvoked", "us", "1", "sign-in")
        wait_for(lambda: os.path.exists(opened), 20, "xdg-open handing the page to the browser")
        agent.wait_said("no portal answered (org.freedesktop.portal.Desktop OpenURI", "the agent's word on the fallback")
        with open(opened) as f:
            [url] = f.read().split()
        assert authorization_url(url).startswith(oidc_server.issuer + "/authorize/"), "the sign-in page, served"
        assert status(daemon, "web")["pendingLogins"] == 1
        # The desktop session ends before the person signs in: the agent leaves no button and no pending login.
        agent.process.terminate()
        assert agent.process.wait(20) == 0, agent.said()
        assert bus.calls(NOTIFICATIONS, "CloseNotification") == [[1]]
        assert status(daemon, "web")["pendingLogins"] == 0 and status(daemon, "web")["state"] == "loginRequired"
    finally:
        bus.stop()


def test_a_session_a_reload_adds_is_watched_from_the_next_list(server, make_tokend, bus, agents):
    daemon = make_tokend(server).start()
    login(daemon, server)
    # The list asked every 3 s, not every minute (TOKENCTL_AGENT_RELIST): the test waits for the next list.
    agent = Agent(daemon, bus, env={**bus.env(), "TOKENCTL_AGENT_RELIST": "3"})
    agents.append(agent)
    agent.wait_said("watching default\n", "the agent watching")
    with open(daemon.config, "a") as f:
        f.write(f'[sessions.extra]\ntoken-endpoint = "{server.token_url}"\nclient-id = "{CLIENT_ID}"\n'
                f'client-secret-file = "{os.path.join(daemon.directory, "client-secret")}"\n')
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 20, "tokend's reload")
    # tokend tells no subscriber of a new session: the agent asks for the list again (each minute by default).
    wait_for(lambda: "watching default, extra" in agent.said(), 30, "the agent watching the new session")
    [posted] = notifications(bus)
    assert posted["summary"] == "Sign-in needed: extra", "not logged in yet, and this user may sign it in"
