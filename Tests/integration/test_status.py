"""tokenctl status for people, against the built tokend and the real
authorization server: what each session is doing and the command that fixes
it, made from the status alone; --json stays tokend's status as it is."""
import errno
import http.server
import json
import os
import re
import subprocess
import threading
import time

from conftest import BIN, CLIENT_ID, AuthServer, login, varlink_call, wait_for
from prometheus import samples


class Said(str):
    """What a tokenctl command printed, the moments before and after it ran, and the run."""
    window: tuple[float, float]
    run: subprocess.CompletedProcess[str]


def human(daemon, *args, input=None):
    """A tokenctl command's output for people, in UTC so times read as the wire's Unix times say; the
    window it ran in. Its exit status is the test's to check."""
    before = time.time()
    run = subprocess.run([os.path.join(BIN, "tokenctl"), *args, "--socket", daemon.socket], capture_output=True,
                         text=True, timeout=30, env={**os.environ, "TZ": "UTC"}, input=input,
                         stdin=None if input is not None else subprocess.DEVNULL)
    said = Said(run.stdout)
    said.window = (before, time.time())
    said.run = run
    return said


def status_text(daemon, *args):
    """`tokenctl status`, read as a person reads it."""
    said = human(daemon, "status", *args)
    # Exit 2 exactly when a session it shows needs a login (tokenctl(1)).
    assert said.run.returncode == (2 if ": login required" in said else 0), (said.run.returncode, said.run.stderr)
    return said


def clock(unix, now):
    """A time as status writes it: "00:22" on the day of `now`, "2026-12-02 00:22" on another."""
    day = time.strftime("%Y-%m-%d", time.gmtime(unix))
    hm = time.strftime("%H:%M", time.gmtime(unix))
    return hm if day == time.strftime("%Y-%m-%d", time.gmtime(now)) else f"{day} {hm}"


def clock_re(unix, said):
    """Each form status may have used for `unix`, as a regular expression: the
    day may turn while tokenctl runs, so both ends of its run count."""
    forms = sorted({clock(unix, now) for now in said.window})
    return "(?:" + "|".join(re.escape(form) for form in forms) + ")"


def wire_status(daemon, session="default"):
    """The session's status as tokend gives it (times as Unix seconds), not as tokenctl prints it."""
    return varlink_call(daemon.socket, "io.tokend.Broker.GetStatus", {"session": session})[1]["parameters"]["status"]


def test_a_refused_refresh_token_says_login_required_and_the_command(server, make_tokend, workdir):
    sessions = {"ci": {"token-endpoint": server.token_url, "client-id": CLIENT_ID,
                       "client-secret-file": os.path.join(workdir, "client-secret")}}
    # Both login endpoints: the advice names both flows (a session without them gets neither).
    flows = {"device-authorization-endpoint": json.dumps(server.base + "/o/device-authorization/"),
             "authorization-endpoint": json.dumps(server.base + "/o/authorize/")}
    daemon = make_tokend(server, sessions=sessions, **flows).start()
    login(daemon, server)
    # Someone else uses tokend's refresh token: the server rotates it away and
    # refuses tokend's next refresh (invalid_grant).
    with open(os.path.join(daemon.state, "default.session")) as f:
        stolen = json.load(f)["record"]["refreshToken"]
    assert server.post("/o/token/", grant_type="refresh_token", refresh_token=stolen)[0] == 200
    refused_at = int(time.time())
    assert daemon.ctl("refresh").returncode == 2
    machine = wire_status(daemon, "default")
    assert machine["state"] == "loginRequired" and "invalid_grant" in machine["lastError"]
    assert refused_at - 1 <= machine["stateSince"] <= time.time() + 1, machine
    text = status_text(daemon)
    block = text.split("\n\n")[1]
    since = clock_re(machine["stateSince"], text)
    assert re.match(rf"default: login required since {since} — {re.escape(machine['lastError'])}\n"
                    r"  Run: tokenctl login --device\n", block), text
    assert "or, on a machine with a browser: tokenctl login --browser" in block
    never = text.split("\n\n")[0]
    assert re.match(r"ci: login required( since (\d{4}-\d\d-\d\d )?\d\d:\d\d)? — not logged in yet", never), text
    counts = samples(daemon.ctl("metrics").stdout)
    assert counts['tokend_session_refresh_results_total{session="default",result="rejected"}'] == 1
    # ci has neither login endpoint: its advice offers no flow, and tokend's reason names ci (issue 54).
    assert "Run: tokenctl login --session ci --refresh-token-file FILE" in never and "--device" not in never, never
    assert "`tokenctl login --session ci`" in never, never
    assert status_text(daemon, "--session", "default") == block


def test_an_active_session_says_until_when_its_token_is_valid(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    machine = wire_status(daemon)
    assert machine["state"] == "active"
    text = status_text(daemon)
    first, *rest = text.splitlines()
    until = clock_re(machine["expiresAt"], text)
    assert re.fullmatch(rf"default: active — token valid until {until} \(in (59|60) min\)", first), text
    assert "Run:" not in text, "nothing to do"
    last = clock_re(machine["lastRefreshAt"], text)
    assert any(re.match(rf"  last refresh {last} \(", line) for line in rest), text


class Unavailable(http.server.ThreadingHTTPServer):
    """A token endpoint that answers every request 503 with Retry-After: 300, on the port of a stopped
    authorization server, and records the paths it was asked for. faultproxy.FaultProxy's 503 carries
    no Retry-After (its 429 asks for 3 s), and its own port is not the one tokend already knows."""
    allow_reuse_address = True  # SO_REUSEADDR: the stopped server's connections may linger in TIME_WAIT
    daemon_threads = True

    def __init__(self, port):
        self.asked = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.asked.append(self.path)
                payload = b"<html>unavailable</html>"
                self.send_response(503)
                self.send_header("Retry-After", "300")
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @classmethod
    def on_port_of(cls, stopped):
        """In place of `stopped` as soon as its port is free: its gunicorn, which AuthServer.stop does not
        wait for, holds the listening socket until its workers have exited. The port stays this test's
        (ports.py)."""
        def bound():
            try:
                return cls(stopped.port)
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                return None
        return wait_for(bound, 30, f"port {stopped.port} given up by the stopped authorization server")

    def stop(self):
        self.shutdown()
        self.server_close()


def test_a_failing_provider_is_said_with_the_token_still_served(workdir, make_tokend):
    # A server of this test's own: it stops here, and the fixture's would be stopped again.
    server = AuthServer(os.path.join(workdir, "as"))
    try:
        daemon = make_tokend(server).start()
        login(daemon, server)
    finally:
        server.stop()
    # The provider fails with a Retry-After of 300 s, so tokend's next attempt cannot come while the test
    # reads the status twice, however busy the machine (without one, the first backoff is about 1 s).
    unavailable = Unavailable.on_port_of(server)
    try:
        generation = wire_status(daemon)["generation"]
        assert daemon.ctl("refresh", "--stale-generation", str(generation)).returncode == 4
        machine = wire_status(daemon)
        assert unavailable.asked == ["/o/token/"], unavailable.asked
        assert machine["state"] == "backingOff" and machine["failures"] == 1, machine
        # Not a login matter: a 503 is a transient failure, said with the provider's answer.
        assert machine["lastError"] == "token endpoint answered HTTP 503", machine
        text = status_text(daemon)
        assert machine["nextRefreshAt"] >= text.window[1] + 250, (machine, text.window)
        assert unavailable.asked == ["/o/token/"], "tokend asked again while the test looked"
    finally:
        unavailable.stop()
    since = clock_re(machine["stateSince"], text)
    assert re.match(rf"default: refreshing fails since {since} — {re.escape(machine['lastError'])}\n"
                    r"  Run: tokenctl doctor\n", text), text
    assert re.search(rf"the current token is still served until {clock_re(machine['expiresAt'], text)}\b", text), text
    assert "1 failed attempt; tokend tries again at " in text
    retry = clock_re(machine["nextRefreshAt"], text)
    assert re.search(rf"tries again at {retry} \(in (4|5) min\) by itself", text), text


def test_json_is_tokends_status_with_times_as_rfc3339(server, make_tokend):
    """tokend's fields, every one; its Unix times as RFC 3339 text (tokenctl(1), CONVENTIONS)."""
    import datetime
    daemon = make_tokend(server).start()
    login(daemon, server)
    reply = varlink_call(daemon.socket, "io.tokend.Broker.GetStatus", {})[1]["parameters"]["status"]
    printed = json.loads(daemon.ctl("status", "--json").stdout)
    times = [k for k in reply if k.endswith("At") or k.endswith("Since")]
    assert "expiresAt" in times and "lastRefreshAt" in times, reply
    for key in (k for k in times if isinstance(printed[k], str)):
        printed[key] = int(datetime.datetime.strptime(printed[key], "%Y-%m-%dT%H:%M:%SZ")
                           .replace(tzinfo=datetime.timezone.utc).timestamp())
    assert printed == reply


RELATIVE = r"\((?:in \d+ (?:s|min|h)|\d+ (?:s|min|h) ago|now)\)"


def test_every_human_time_reads_the_same(server, make_tokend, workdir):
    """One rule for a time in human output (tokenctl(1), CONVENTIONS): local "HH:MM" today, with the
    date on another day, then how far it is. login, sessions, refresh, share create and list, status
    and a device login's code say their times so; none prints RFC 3339 (that is --json's)."""
    device = {"device-authorization-endpoint": json.dumps(server.base + "/o/device-authorization/")}
    daemon = make_tokend(server, **device).start()
    said = {"login": human(daemon, "login", input=server.password_grant()[1]["refresh_token"] + "\n")}
    machine = wire_status(daemon)
    assert said["login"].run.returncode == 0, said["login"].run.stderr
    assert re.search(rf"^expires: +{clock_re(machine['expiresAt'], said['login'])} {RELATIVE}$", said["login"], re.M)
    assert re.search(rf"^last refresh: {clock_re(machine['lastRefreshAt'], said['login'])} {RELATIVE}$",
                     said["login"], re.M), said["login"]
    said["sessions"] = human(daemon, "sessions")
    assert re.search(rf"\texpires {clock_re(machine['expiresAt'], said['sessions'])} {RELATIVE}$",
                     said["sessions"], re.M), said["sessions"]
    said["refresh"] = human(daemon, "refresh", "--stale-generation", "1")
    machine = wire_status(daemon)
    assert re.fullmatch(rf"generation 2, expires {clock_re(machine['expiresAt'], said['refresh'])} {RELATIVE}\n",
                        said["refresh"]), said["refresh"]
    said["status"] = status_text(daemon)
    assert re.search(rf"valid until {clock_re(machine['expiresAt'], said['status'])} {RELATIVE}", said["status"])
    said["share create"] = human(daemon, "share", "create", os.path.join(workdir, "s.sock"), "--ttl", "2h")
    shared = varlink_call(daemon.socket, "io.tokend.Broker.ListShares", {})[1]["parameters"]["shares"][0]
    assert re.search(rf"until {clock_re(shared['expiresAt'], said['share create'])} \(in 2 h\)$",
                     said["share create"], re.M), said["share create"]
    said["share list"] = human(daemon, "share", "list")
    assert re.search(rf"\tuntil {clock_re(shared['expiresAt'], said['share list'])} \(in 2 h\)\t",
                     said["share list"]), said["share list"]
    process = subprocess.Popen([os.path.join(BIN, "tokenctl"), "login", "--device", "--socket", daemon.socket],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TZ": "UTC"})
    try:
        before, line = time.time(), ""
        while not line.startswith("The code expires "):
            line = process.stdout.readline()
            assert line, process.stderr.read()
        code = Said(line)
        code.window = (before, time.time())
        # The device code's lifetime is the server's (1800 s by default): its expiry is half an hour on.
        forms = "|".join(clock_re(int(t) + 1800 + d, code) for t in code.window for d in (-1, 0, 1))
        assert re.fullmatch(rf"The code expires (?:{forms}) \(in (29|30) min\)\.\n", line), line
    finally:
        process.terminate()
        process.wait(20)
    assert {k: v for k, v in said.items() if re.search(r"\d\d:\d\d:\d\d|T\d\d:", v)} == {}, said
