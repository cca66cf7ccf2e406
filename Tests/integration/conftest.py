"""Fixtures: the real authorization server (django-oauth-toolkit under
gunicorn on 127.0.0.1) and the built tokend binary on a real Unix socket;
and the harness that runs the tests side by side (pytest-xdist, `make
integration-test`), described in docs/testing.md."""
import fcntl
import fnmatch
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import weakref

import pytest

from ports import free_port  # noqa: F401 (the tests import it from here)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("TOKEND_BIN", os.path.join(ROOT, ".build", "debug"))
AUTHSERVER = os.path.join(ROOT, "Tests", "authserver", "serve.py")
CLIENT_ID, CLIENT_SECRET = "tokend-test", "tokend-test-secret"




def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class AuthServer:
    def __init__(self, directory, grace=0, access_ttl=3600, port=None, extra=()):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, AUTHSERVER, directory, str(self.port), "--grace", str(grace),
             "--access-ttl", str(access_ttl), *extra],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(directory, "server.log"), "a"),
            start_new_session=True)
        wait_for(self._ready, 60, "authorization server")

    def _ready(self):
        if os.path.exists(os.path.join(self.directory, "ready")):
            return True
        if self.process.poll() is not None:
            try:
                with open(os.path.join(self.directory, "server.log"), errors="replace") as log:
                    said = log.read()[-2000:]
            except OSError as error:
                said = f"(no log: {error})"
            raise AssertionError(f"the authorization server exited ({self.process.returncode}): {said}")
        return False

    @property
    def issuer(self):
        return self.base + "/o"

    @property
    def token_url(self):
        return self.base + "/o/token/"

    def password_grant(self):
        """A first refresh token, from the password grant."""
        return self.post("/o/token/", grant_type="password", username="alice", password="alice-password")

    def post(self, path, **fields):
        request = urllib.request.Request(self.base + path, data=urllib.parse.urlencode(fields).encode())
        auth = f"{CLIENT_ID}:{CLIENT_SECRET}".encode()
        import base64
        request.add_header("Authorization", "Basic " + base64.b64encode(auth).decode())
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            body = error.read()
            return error.code, (json.loads(body) if body.startswith(b"{") else {})

    def grants(self, grant=None):
        path = os.path.join(self.directory, "grants.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        return [l for l in lines if grant is None or l["grant"] == grant]

    def stop(self):
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(10)


class Tokend:
    """The built tokend with its own config, state directory and socket."""

    def __init__(self, directory, server, daemon=None, sessions=None, **session):
        self.directory = directory
        self.socket = os.path.join(directory, "sock")
        self.state = os.path.join(directory, "state")
        self.log_path = os.path.join(directory, "tokend.log")
        secret = os.path.join(directory, "client-secret")
        # 0600: tokend refuses a secret file other users may read.
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(CLIENT_SECRET + "\n")
        options = {"refresh-margin": 5, "min-valid": 3}
        options.update(session)
        lines = [
            "[daemon]", f'socket = "{self.socket}"', f'state-directory = "{self.state}"', 'log-level = "debug"',
        ] + [f"{k} = {v}" for k, v in (daemon or {}).items()] + [
            "[sessions.default]", f'token-endpoint = "{server.token_url}"',
            f'revocation-endpoint = "{server.base}/o/revoke_token/"', f'client-id = "{CLIENT_ID}"',
            f'client-secret-file = "{secret}"',
        ] + [f"{k} = {v}" for k, v in options.items()]
        for name, keys in (sessions or {}).items():
            lines += [f"[sessions.{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        self.config = os.path.join(directory, "tokend.toml")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.process = None

    def start(self, env=None, prefix=()):
        """`prefix`: a command to run tokend under (e.g. `ip netns exec NAME`)."""
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen([*prefix, os.path.join(BIN, "tokend"), "--config", self.config],
                                        stdout=self.log, stderr=self.log, env=env)
        wait_for(lambda: self._connectable(), 20, "tokend socket")
        return self

    def _connectable(self):
        if self.process.poll() is not None:
            raise AssertionError(f"tokend exited with {self.process.returncode}: {self.logs()}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(self.socket)
            return True
        except OSError:
            return False

    def stop(self, sig=signal.SIGTERM):
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(20)
        return self.process.returncode

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def ctl(self, *args, input=None):
        command = [os.path.join(BIN, "tokenctl"), args[0], "--socket", self.socket, *args[1:]]
        return subprocess.run(command, input=input, capture_output=True, text=True, timeout=60)

    def call(self, method, **parameters):
        return varlink_call(self.socket, method, parameters)


def varlink_call(path, method, parameters=None, more=False):
    """One raw Varlink call; returns the raw reply bytes and the parsed reply."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        message = {"method": method, "parameters": parameters or {}}
        if more:
            message["more"] = True
        s.sendall(json.dumps(message).encode() + b"\0")
        raw = read_frame(s)
        return raw, json.loads(raw)


# Bytes read past a frame, per socket. Weakly keyed by the socket itself: keyed
# by id(), a new socket that reused a closed one's id inherited its leftovers.
_unread = weakref.WeakKeyDictionary()


def read_frame(s):
    """The next NUL-terminated frame; bytes after it are kept for the next call
    (pipelined replies can arrive in one read)."""
    data = _unread.pop(s, b"")
    while b"\0" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    frame, rest = data.split(b"\0", 1)
    if rest:
        _unread[s] = rest
    return frame


@pytest.fixture
def workdir():
    # Short paths: Unix socket paths are limited to 108 bytes.
    directory = tempfile.mkdtemp(prefix="tk", dir="/tmp")
    yield directory
    if not os.environ.get("KEEP_TEST_DIRS"):
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def server(workdir):
    instance = AuthServer(os.path.join(workdir, "as"))
    yield instance
    instance.stop()


@pytest.fixture
def short_server(workdir):
    """Access tokens live 12 s, so expiry and proactive refresh happen in-test."""
    instance = AuthServer(os.path.join(workdir, "as"), access_ttl=12)
    yield instance
    instance.stop()


@pytest.fixture
def make_tokend(workdir):
    started = []

    def make(server, daemon=None, **session):
        daemon = Tokend(workdir, server, daemon=daemon, **session)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.stop(signal.SIGKILL)


def issued_refresh_tokens(server):
    """Every refresh token the authorization server has issued (rotated ones included)."""
    db = sqlite3.connect(os.path.join(server.directory, "db.sqlite3"))
    return [row[0].encode() for row in db.execute("select token from oauth2_provider_refreshtoken")]


def scan_for_secrets(directory, secrets):
    """Reads every regular file below `directory`; fails naming a file that holds
    one of `secrets`; returns how many files it read."""
    files = 0
    for folder, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            files += 1
            with open(path, "rb") as f:
                data = f.read()
            assert not [s for s in secrets if s in data], f"a secret in {path}"
    return files


def login(daemon, server):
    status, grant = server.password_grant()
    assert status == 200, grant
    result = daemon.ctl("login", input=grant["refresh_token"] + "\n")
    assert result.returncode == 0, result.stderr
    return grant["refresh_token"]


def open_to_other_users(make_tokend, server, workdir, access, **daemon):
    """A started, logged-in tokend whose socket other users (setpriv) can reach,
    with `access` (TOML lines) as its [access] table."""
    os.chmod(workdir, 0o755)
    instance = make_tokend(server, daemon={"socket-mode": '"0666"', **daemon})
    with open(instance.config) as f:
        text = f.read()
    with open(instance.config, "w") as f:
        f.write("[access]\n" + access + "\n" + text)
    instance.start()
    login(instance, server)
    return instance


# Side by side: `make integration-test` runs this suite on several pytest-xdist
# workers (`--dist loadgroup`; docs/testing.md says how many and why). Every
# test owns its ports (free_port, ports.py), its directory (workdir), and the
# servers and processes it starts. A test that cannot be made independent of
# the others says so with a mark, and why:
#
#   @pytest.mark.uses("NAME", "why")  the tests that use NAME run one after
#                                     another, on one worker (xdist_group NAME)
#   @pytest.mark.alone("why")         nothing else runs while it does
#
# A long campaign or soak says so, and why; `make test` and CI leave it out
# (-m "not long"), `make test-long` runs these and no others:
#
#   @pytest.mark.long("why")
#
# Most tests carry their marks themselves. FIXTURE_MARKS marks every test that
# uses a fixture which takes something of the whole machine's; FILE_MARKS holds
# the marks of tests in files others were editing when the harness landed
# (a pattern on "file.py::test_name[parameters]", fnmatch style).

SUBUID = pytest.mark.uses("etc-subuid", "the fixture appends a range to /etc/subuid and restores the "
                          "file after the test: two at once would undo each other's range")
BROWSER = pytest.mark.uses("browser", "headless Chromium or Firefox: a browser starting takes a core "
                           "for seconds, and two beside each other on 2 cores make their pages' timeouts")
WEBVIEW = pytest.mark.uses("webview", "a WebKitGTK web view (its web and network processes) on Xvfb: "
                           "as heavy as a browser")

FIXTURE_MARKS = {
    "subordinate_range": [SUBUID],
}

FILE_MARKS = [
    ("test_dpop_pages.py::*[[]chromium*", BROWSER),
    ("test_dpop_pages.py::*[[]firefox*", BROWSER),
    ("test_dpop_pages.py::*[[]webview*", WEBVIEW),
    ("test_dpop_pages.py::test_a_page_of_a_bearer_session_fetches_with_its_token_alone", BROWSER),
    ("test_dpop_proxy.py::test_a_refused_proof_is_a_clear_status_logged_once",
     pytest.mark.alone("120 requests at once must outrun the refill of tokend's bound on proofs (some 503s "
                       "asserted): whether they do depends on how fast they arrive, which other tests slow")),
    ("test_fleet.py::test_proactive_refresh_over_ten_lifetimes_happens_once_per_lifetime",
     pytest.mark.long("a soak: ten token lifetimes of 4 s each, watched on three hosts (45 s or more)")),
    ("test_hostile_peers.py::test_accepting_resumes_as_soon_as_a_descriptor_frees",
     pytest.mark.alone("asserts tokend accepts within 0.25 s of a descriptor freeing: on 2 cores shared "
                       "with other tests that is their scheduling, not tokend's")),
]

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"... under xdist, else None
RUN = "TOKEND_TEST_RUN"  # the run's directory: the turnstile's lock files


def pytest_configure(config):
    config.addinivalue_line("markers", "uses(name, why): runs one after another with every other test "
                            "that uses `name` (a resource of the machine's), on one worker")
    config.addinivalue_line("markers", "alone(why): runs with no other test running beside it")
    config.addinivalue_line("markers", "long(why): a long campaign or soak, run by `make test-long`, "
                            "not by `make test` or CI")
    # pytest-xdist registers it too; a run without xdist (`-p no:xdist`) needs it for --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's group, made from `uses` and `alone`")
    if WORKER is None and getattr(config.option, "numprocesses", None):
        # Made before the workers start: they inherit the variable.
        os.environ[RUN] = tempfile.mkdtemp(prefix="tkrun", dir="/tmp")


def pytest_unconfigure(config):
    if WORKER is None and os.environ.get(RUN):
        shutil.rmtree(os.environ.pop(RUN), ignore_errors=True)


def _marks(item):
    """The item's `uses`, `alone` and `long` marks: its own, its fixtures', its file's entry in FILE_MARKS."""
    marks = [m for m in item.iter_markers() if m.name in ("uses", "alone", "long")]
    for fixture in item.fixturenames:
        marks += [m.mark for m in FIXTURE_MARKS.get(fixture, [])]
    name = os.path.basename(item.nodeid.split("::", 1)[0]) + "::" + item.nodeid.split("::", 1)[-1]
    marks += [m.mark for pattern, m in FILE_MARKS if fnmatch.fnmatchcase(name, pattern)]
    return marks


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Each `uses` or `alone` mark becomes the test's xdist group; a test can be in one group only.
    A `long` mark from the tables is put on the test itself, where `-m long` (run after this) sees it."""
    problems = []
    for item in items:
        marks = _marks(item)
        if not item.get_closest_marker("long"):
            for mark in (m for m in marks if m.name == "long"):
                item.add_marker(pytest.mark.long(*mark.args, **mark.kwargs))
        for mark in marks:
            arity = 2 if mark.name == "uses" else 1
            if len(mark.args) != arity or mark.kwargs or not all(isinstance(a, str) and a for a in mark.args):
                problems.append(f"{item.nodeid}: {mark.name}{mark.args} needs {'a name and ' * (arity - 1)}a reason")
        alone = any(m.name == "alone" for m in marks)
        groups = {"alone"} if alone else {m.args[0] for m in marks if m.name == "uses"}
        if len(groups) > 1:
            problems.append(f"{item.nodeid}: in {sorted(groups)} at once; one group, or mark it alone")
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups.pop()))
        item.stash[_ALONE] = alone
    if problems:
        raise pytest.UsageError("\n".join(problems))


@pytest.hookimpl(tryfirst=True)  # after every collection_modifyitems (xdist's adds each group to the node id)
def pytest_collection_finish(session):
    """A run whose groups did not take is refused: its tests would overlap by luck."""
    if WORKER is not None and session.config.getvalue("loadgroup"):
        lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if lost:
            raise pytest.UsageError(f"pytest-xdist did not group {lost[0]} and {len(lost) - 1} more "
                                    f"(pytest {pytest.__version__}; Tests/integration/requirements.txt pins one that works)")


_ALONE = pytest.StashKey[bool]()

# The time each file adds to a run: its tests' set-ups, calls and tear-downs,
# summed (on one worker they would follow each other). A file over the budget
# says why in its header (docs/testing.md).
FILE_BUDGET = 90.0
_file_seconds = {}


def pytest_runtest_logreport(report):
    if WORKER is None:  # the controller (or a run without workers) hears every worker's reports
        name = report.nodeid.split("::", 1)[0]
        _file_seconds[name] = _file_seconds.get(name, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if WORKER is not None or not _file_seconds:
        return
    ranked = sorted(_file_seconds.items(), key=lambda item: -item[1])
    slowest = [(name, seconds) for i, (name, seconds) in enumerate(ranked) if i < 15 or seconds > FILE_BUDGET]
    terminalreporter.section("the files that add the most time (set-ups, calls, tear-downs summed)")
    for name, seconds in slowest:
        over = ""
        if seconds > FILE_BUDGET:
            said = _header_says_why(name)
            over = f"  (over {FILE_BUDGET:.0f} s: {'its header says why' if said else 'ITS HEADER DOES NOT SAY WHY'})"
        terminalreporter.write_line(f"{seconds:8.1f}s  {name}{over}")


def _header_says_why(name):
    """A file over the budget starts with a comment `# Over 90 s of ...` saying why (docs/testing.md)."""
    path = os.path.join(os.path.dirname(__file__), os.path.basename(name))
    try:
        with open(path) as f:
            head = [f.readline() for _ in range(3)]
    except OSError:
        return False
    return any(line.startswith(f"# Over {FILE_BUDGET:.0f} s") for line in head)


class _Turnstile:
    """Lets an `alone` test run with nothing beside it. Every test holds the room, shared, while it
    runs (set-up and tear-down included); an `alone` test holds it exclusively. The gate, taken by
    every test before the room, keeps new tests out while an `alone` one waits for the room to empty."""

    def __init__(self, run):
        self.gate = open(os.path.join(run, "gate"), "a")
        self.room = open(os.path.join(run, "room"), "a")
        self.exclusive = False  # an `alone` test left the room held for the next `alone` one

    def enter(self, alone):
        if self.exclusive:
            return  # held since the `alone` test before (leave(keep=True) only when this one is alone too)
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.exclusive = alone

    def leave(self, keep=False):
        """`keep`: the next test on this worker is `alone` too, and runs in the room emptied for this one
        (the `alone` group runs on one worker: were the room let go between them, the other workers
        would start tests the next `alone` one then waits out)."""
        if keep and self.exclusive:
            return
        fcntl.flock(self.room, fcntl.LOCK_UN)
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.exclusive = False


_turnstile = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist every test passes the turnstile; the wait is not part of its reported durations."""
    global _turnstile
    run = os.environ.get(RUN)
    if WORKER is None or not run:
        yield
        return
    if _turnstile is None:
        _turnstile = _Turnstile(run)
    alone = item.stash.get(_ALONE, False)
    _turnstile.enter(alone)
    try:
        yield
    finally:
        _turnstile.leave(keep=alone and nextitem is not None and nextitem.stash.get(_ALONE, False))
