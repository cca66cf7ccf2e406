"""What a careful attacker on the same host tried (docs/security.md), each
reproduced against the built binaries and shown to fail. Other users are
simulated with setpriv (numeric uid/gid, no account needed)."""
import json
import os
import stat
import subprocess
import threading
from types import SimpleNamespace

import pytest

from conftest import BIN, login, open_to_other_users, varlink_call, wait_for
from faultproxy import FaultProxy

B = "io.tokend.Broker."


def call(daemon, method, **parameters):
    return varlink_call(daemon.socket, B + method, parameters)[1]


def refresh_grants(server):
    return server.grants("refresh_token")


def test_a_second_tokend_on_the_same_state_exits_and_the_session_survives(server, make_tokend, workdir):
    daemon = make_tokend(server, daemon={"forced-refreshes-per-minute": 600}).start()
    login(daemon, server)
    socket_inode = os.stat(daemon.socket).st_ino
    stop, problems, refreshed = threading.Event(), [], []

    def refresh_back_to_back():
        while not stop.is_set():
            generation = call(daemon, "GetToken")["parameters"]["token"]["generation"]
            reply = call(daemon, "Refresh", staleGeneration=generation)
            if "error" in reply:
                problems.append(reply)
            else:
                refreshed.append(reply["parameters"]["token"]["generation"])
    worker = threading.Thread(target=refresh_back_to_back)
    worker.start()
    try:
        wait_for(lambda: len(refreshed) >= 3, 20, "refreshes under way")
        tokend = os.path.join(BIN, "tokend")
        # Same configuration: same socket, same state.
        same = subprocess.run([tokend, "--config", daemon.config], capture_output=True, text=True, timeout=20)
        # Another socket, same state directory.
        other_config = os.path.join(workdir, "other.toml")
        with open(daemon.config) as f:
            text = f.read()
        with open(other_config, "w") as f:
            f.write(text.replace(f'socket = "{daemon.socket}"', f'socket = "{daemon.socket}2"'))
        other = subprocess.run([tokend, "--config", other_config], capture_output=True, text=True, timeout=20)
        after = len(refreshed)
        wait_for(lambda: len(refreshed) >= after + 3, 20, "refreshes going on after the second tokends")
    finally:
        stop.set()
        worker.join(30)
    for second in (same, other):
        assert second.returncode == 75, second.stderr
        assert daemon.state in second.stderr and f"pid {daemon.process.pid}" in second.stderr, second.stderr
        assert "kill -9" in second.stderr
    assert not os.path.exists(daemon.socket + "2"), "the second one bound nothing"
    assert os.stat(daemon.socket).st_ino == socket_inode, "the running tokend keeps its socket"
    assert daemon.process.poll() is None
    assert problems == [], problems
    assert [g for g in refresh_grants(server) if g["status"] != 200] == [], "no refresh token was replayed"
    status = call(daemon, "GetStatus")["parameters"]["status"]
    assert status["state"] == "active" and status["generation"] >= refreshed[-1]
    print(f"{len(refreshed)} back-to-back refreshes while two more tokends tried to start; 0 lost")


HOLDER = r"""
import json, socket, sys
path, count = sys.argv[1], int(sys.argv[2])
held, answers = [], []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.settimeout(5)
    try:
        s.sendall(b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0')
        data = b""
        while b"\0" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        reply = json.loads(data.split(b"\0")[0]) if b"\0" in data else {"error": "closed"}
    except OSError as error:
        reply = {"error": type(error).__name__}
    answers.append(reply.get("error", "token"))
    held.append(s)
print(json.dumps(answers), flush=True)
sys.stdin.read()
"""


def hold(daemon, uid, count, groups=None):
    """Connections held by `uid` until the returned process's stdin closes; also the answer each got."""
    process = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={groups}" if groups else "--clear-groups",
         "/usr/bin/python3", "-c", HOLDER, daemon.socket, str(count)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return process, json.loads(process.stdout.readline())


def test_connection_slots_are_shared_per_user_and_admins_keep_theirs(server, make_tokend, workdir):
    daemon = open_to_other_users(make_tokend, server, workdir, 'read-users = ["4242", "4243"]',
                                 **{"max-connections": 4, "max-connections-per-user": 3})
    # A peer allowed nothing: every connection answered PermissionDenied and closed; it holds no slot.
    stranger, answers = hold(daemon, 65534, 40)
    assert answers == ["org.varlink.service.PermissionDenied"] * 40, answers
    # A reader gets its share and no more.
    first, answers = hold(daemon, 4242, 5)
    assert answers == ["token"] * 3 + [B + "TooManyConnections"] * 2, answers
    second, answers = hold(daemon, 4243, 3)
    assert answers == ["token", B + "TooManyConnections", B + "TooManyConnections"], "the limit is reached"
    # Every caller slot is taken; root (an admin) still logs out and in.
    assert daemon.ctl("token").returncode == 0
    assert daemon.ctl("logout", "--no-revoke").returncode == 0
    login(daemon, server)
    for process in (stranger, first, second):
        process.stdin.close()
        process.wait(10)
    assert "peer may call nothing" in daemon.logs()


def test_compare_and_refresh_at_or_above_the_current_generation_is_rate_limited(server, make_tokend):
    daemon = make_tokend(server, daemon={"forced-refreshes-per-minute": 2}).start()
    login(daemon, server)
    generation = call(daemon, "GetToken")["parameters"]["token"]["generation"]
    before = len(refresh_grants(server))
    # The legitimate case: 100 clients hit a 401 with the current token at once: one refresh.
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(call(daemon, "Refresh", staleGeneration=generation)))
               for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all("token" in r.get("parameters", {}) for r in replies), replies[:3]
    assert len(refresh_grants(server)) == before + 1
    # The attack: a generation from the future, 30 times.
    attack = [call(daemon, "Refresh", staleGeneration=2 ** 53) for _ in range(30)]
    limited = [r for r in attack if r.get("error") == B + "RateLimited"]
    grants = len(refresh_grants(server)) - before
    print(f"30 Refresh(staleGeneration=2^53): {30 - len(limited)} served, {len(limited)} rate-limited; {grants} grants")
    assert grants <= 2 and len(limited) >= 29


@pytest.fixture
def proxy(server):
    instance = FaultProxy(server.base)
    yield instance
    instance.stop()


def test_the_token_endpoint_cannot_redirect_the_refresh_token_elsewhere(server, proxy, make_tokend):
    endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
    daemon = make_tokend(endpoint, **{"client-auth": '"post"'}).start()
    login(daemon, server)
    before = call(daemon, "GetToken")["parameters"]["token"]
    proxy.mode = "redirect"
    reply = call(daemon, "Refresh")
    assert reply["parameters"]["token"] == before, "the valid token is served; the redirect is an error"
    status = call(daemon, "GetStatus")["parameters"]["status"]
    assert "307" in status["lastError"], status
    assert proxy.calls("redirect"), "the redirect was answered"
    assert proxy.thief.received == [], "nothing, secret or token, reached the other origin"


def test_provider_text_is_redacted_of_every_secret(server, proxy, make_tokend, workdir):
    endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
    daemon = make_tokend(endpoint, **{"client-auth": '"post"'}).start()
    login(daemon, server)
    with open(os.path.join(daemon.state, "default.session")) as f:
        refresh_token = json.load(f)["record"]["refreshToken"]
    import socket as socketlib
    subscriber = socketlib.socket(socketlib.AF_UNIX)
    subscriber.connect(daemon.socket)
    subscriber.sendall(json.dumps({"method": B + "Subscribe", "parameters": {}, "more": True}).encode() + b"\0")
    proxy.mode = "echo"
    reply = varlink_call(daemon.socket, B + "Refresh")[0]
    status = varlink_call(daemon.socket, B + "GetStatus")[0]
    # A refresh's events are delivered before its reply: read them until the stream is quiet.
    subscriber.settimeout(0.5)
    events = b""
    try:
        while True:
            chunk = subscriber.recv(65536)
            if not chunk:
                break
            events += chunk
    except OSError:
        pass
    assert b"you sent" in status and b"[redacted]" in status, status
    secret = open(os.path.join(workdir, "client-secret")).read().strip()
    for where, text in (("reply", reply), ("status", status), ("events", events), ("log", daemon.logs().encode())):
        assert refresh_token.encode() not in text, f"the refresh token reached the {where}"
        assert secret.encode() not in text, f"the client secret reached the {where}"


def test_token_files_grant_other_users_nothing(server, make_tokend, workdir):
    runtime = os.path.join(workdir, "run")
    daemon = make_tokend(server, daemon={"runtime-directory": json.dumps(runtime)},
                         **{"token-files": '[{ path = "app/token", group = "4500", mode = "0644" }]'})
    refused = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True, text=True,
                             timeout=20)
    assert refused.returncode == 78 and "must give other users nothing" in refused.stderr, refused.stderr
    with open(daemon.config) as f:
        text = f.read()
    # A group that may write the file could hand its readers a token of its own: refused at start too.
    with open(daemon.config, "w") as f:
        f.write(text.replace('"0644"', '"0660"'))
    refused = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True, text=True,
                             timeout=20)
    assert refused.returncode == 78 and "must not let the group write" in refused.stderr, refused.stderr
    with open(daemon.config, "w") as f:
        f.write(text.replace('"0644"', '"0640"').replace('path = "app/token"', 'path = "app/sub/token"'))
    os.chmod(workdir, 0o755)
    os.makedirs(runtime, mode=0o755)
    daemon.start()
    login(daemon, server)
    path = os.path.join(runtime, "app", "sub", "token")
    wait_for(lambda: os.path.exists(path), 5, "the token file")
    for directory in (os.path.join(runtime, "app"), os.path.join(runtime, "app", "sub")):
        info = os.stat(directory)
        assert stat.S_IMODE(info.st_mode) == 0o750 and info.st_gid == 4500, (directory, oct(info.st_mode))

    def read_as(uid, groups):
        return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", groups, "cat", path],
                              capture_output=True, text=True).returncode
    assert read_as(4501, "--groups=4500") == 0, "the configured group reaches its file"
    assert read_as(65534, "--clear-groups") != 0, "nobody else does"


def test_git_credential_answers_only_https_or_loopback(server, make_tokend):
    daemon = make_tokend(server, **{"git-hosts": '["git.example.com", "127.0.0.1:8080"]'}).start()
    login(daemon, server)

    def ask(protocol, host):
        return subprocess.run([os.path.join(BIN, "tokenctl"), "git-credential", "--socket", daemon.socket, "get"],
                              input=f"protocol={protocol}\nhost={host}\n\n", capture_output=True, text=True)
    assert "password=" in ask("https", "git.example.com").stdout
    plain = ask("http", "git.example.com")
    assert plain.stdout == "" and "only https" in plain.stderr, "no bearer token in clear over the network"
    assert "password=" in ask("http", "127.0.0.1:8080").stdout


SLOW_SENDER = r"""
import socket, sys
path, count = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    try:
        s.sendall(b"{" * (1024 * 1024 - 16))
    except OSError:
        pass
    held.append(s)
print("sent", flush=True)
sys.stdin.read()  # holds every connection until the test closes stdin
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def test_unfinished_messages_are_bounded_per_user(server, make_tokend, workdir):
    # 200 connections each holding an almost complete 1 MiB message would
    # pin 200 MiB; one user's unfinished bytes are capped (4 MiB).
    daemon = open_to_other_users(make_tokend, server, workdir, 'read-users = ["4242"]', **{"frame-timeout": 30})
    before = rss_kib(daemon.process.pid)
    sender = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "/usr/bin/python3", "-c",
                               SLOW_SENDER, daemon.socket, "200"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert sender.stdout.readline() == "sent\n", "the sender holds 200 half-sent messages"
    wait_for(lambda: "one person's connections hold too many bytes" in daemon.logs(), 10, "the per-person cap reached")
    growth = rss_kib(daemon.process.pid) - before
    sender.stdin.close()
    sender.wait(60)
    print(f"200 half-sent 1 MiB messages from one user: tokend RSS grew {growth} KiB")
    assert growth < 32 * 1024, growth
    assert daemon.ctl("token").returncode == 0
