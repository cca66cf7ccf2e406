"""Caller identity: SO_PEERCRED decides who may call what. Other users are
simulated with setpriv (numeric uid/gid, no account needed)."""
import json
import os
import shutil
import signal
import subprocess

import pytest

from conftest import BIN, login, open_to_other_users, varlink_call, wait_for


@pytest.fixture(autouse=True)
def setpriv_is_installed() -> None:
    """Without setpriv these tests cannot act as another user: that is a broken test host, not a reason to pass."""
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv is missing: apt install util-linux (every test here runs callers as other users with it)")


def as_user(daemon, uid, gid, *args):
    command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
               os.path.join(BIN, "tokenctl"), args[0], "--socket", daemon.socket, *args[1:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def reload_with_access(daemon, access):
    """Puts `access` (TOML lines) first in the config as its [access] table and reloads (SIGHUP)."""
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write("[access]\n" + access + "\n" + text)
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 10, "reload")


def test_peer_credentials_decide_who_may_call_what(server, make_tokend, workdir):
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}).start()
    login(daemon, server)
    # Default policy: root (and tokend's own user) administer; tokend's group (here gid 0) reads.
    stranger = as_user(daemon, 4242, 4242, "token")
    assert stranger.returncode == 6 and "not allowed" in stranger.stderr, stranger.stderr
    wait_for(lambda: "peer may call nothing" in daemon.logs() and "peer.uid=4242" in daemon.logs(), 5, "log line")
    reader = as_user(daemon, 4242, 0, "token")
    assert reader.returncode == 0 and reader.stdout.strip(), reader.stderr
    assert as_user(daemon, 4242, 0, "status").returncode == 0
    assert as_user(daemon, 4242, 0, "logout").returncode == 6, "readers may not log out"
    assert as_user(daemon, 4242, 0, "login", "--refresh-token-file", "/dev/null").returncode != 0
    # Introspection is open to every caller the policy admits; a peer allowed
    # nothing is answered PermissionDenied at once and holds no connection.
    probe = ("import json,socket; s=socket.socket(socket.AF_UNIX); s.connect(%r); "
             "s.sendall(b'{\"method\":\"org.varlink.service.GetInfo\"}\\0'); print(s.recv(65536)[:-1].decode())"
             % daemon.socket)

    def introspect(uid, gid):
        return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/usr/bin/python3",
                               "-c", probe], capture_output=True, text=True, timeout=30).stdout
    assert '"product":"tokend"' in introspect(4242, 0)
    assert "org.varlink.service.PermissionDenied" in introspect(4242, 4242)
    # Reload with an explicit policy: user 4242 may now read, gid 0 no longer.
    reload_with_access(daemon, 'read-users = ["4242"]\nread-groups = []')
    assert as_user(daemon, 4242, 4242, "token").returncode == 0
    assert as_user(daemon, 4243, 0, "token").returncode == 6
    assert varlink_call(daemon.socket, "io.tokend.Broker.GetToken")[1].get("error") is None, "root still admin"


def test_core_dumps_are_off(server, make_tokend):
    daemon = make_tokend(server).start()
    with open(f"/proc/{daemon.process.pid}/limits") as f:
        core = next(line for line in f if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"], core


def test_unknown_user_in_policy_is_a_clear_error(server, make_tokend):
    daemon = make_tokend(server)
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write('[access]\nadmin-users = ["no-such-user-xyz"]\n' + text)
    result = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True, text=True,
                            timeout=20)
    assert result.returncode == 78
    assert 'access: no user named "no-such-user-xyz"' in result.stderr


def test_cookie_writers_and_per_session_policy(server, make_tokend, workdir):
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'})
    with open(daemon.config) as f:
        text = f.read()
    # Globally: uid 5000 may write cookies. The default session narrows reading
    # to uid 5001 (plus admins and cookie writers).
    with open(daemon.config, "w") as f:
        f.write('[access]\ncookies-write-users = ["5000"]\nread-groups = []\n' + text
                + '[sessions.default.access]\nread-users = ["5001"]\n')
    daemon.start()
    login(daemon, server)
    url = "http://127.0.0.1:9/"

    def run(uid, *args):
        return as_user(daemon, uid, uid, *args)

    def import_as(uid):
        probe = ("import json,socket; s=socket.socket(socket.AF_UNIX); s.connect(%r); "
                 "s.sendall(json.dumps({'method':'io.tokend.Broker.ImportCookies','parameters':"
                 "{'url':%r,'setCookie':['a=1']}}).encode()+b'\\0'); print(s.recv(65536)[:-1].decode())"
                 % (daemon.socket, url))
        out = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3",
                              "-c", probe], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)

    assert import_as(5001).get("error") == "org.varlink.service.PermissionDenied", "readers may not write cookies"
    assert import_as(5000)["parameters"]["applied"] == 1
    assert "a=1" in run(5000, "cookies", url).stdout.split("; ")[-1], "cookie writers may read"
    assert run(5001, "cookies", url).returncode == 0
    assert run(5002, "cookies", url).returncode == 6
    # ListSessions shows a caller only the sessions it may read.
    listed = run(5001, "sessions", "--json")
    assert listed.returncode == 6, "5001 reads only the default session, not the global list"


CALLS_AS = r"""
import json, socket, sys
path, count = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX)
s.connect(path)
call = b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0'
answered = 0
buffer = b""
try:
    for _ in range(count):
        s.sendall(call)
        while b"\0" not in buffer:
            chunk = s.recv(65536)
            if not chunk:
                raise EOFError
            buffer += chunk
        frame, _, buffer = buffer.partition(b"\0")
        if "token" in json.loads(frame).get("parameters", {}):
            answered += 1
except (OSError, EOFError):
    pass
print(answered)
"""


def traced(pid):
    """Whether every thread of `pid` has a tracer."""
    tracers = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                tracers.append(next(line for line in f if line.startswith("TracerPid:")).split()[1])
        except FileNotFoundError:  # the thread ended
            pass
    return tracers and "0" not in tracers


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is needed")
def test_a_group_admitted_caller_costs_no_user_or_group_database_lookup(server, make_tokend, workdir):
    # uid 4300 may read only through its supplementary group 4301. Access is
    # decided from the groups the kernel recorded at connect (SO_PEERGROUPS):
    # 1,000 calls must not read /etc/group or /etc/passwd (or ask nscd) on
    # the thread that serves every client.
    daemon = open_to_other_users(make_tokend, server, workdir, 'read-groups = ["4301"]')
    trace = os.path.join(workdir, "strace.txt")
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=openat,open,connect", "-o", trace,
                               "-p", str(daemon.process.pid)], stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: traced(daemon.process.pid), 10, "strace attached to every thread")

        def calls(groups):
            result = subprocess.run(["setpriv", "--reuid=4300", "--regid=4300", f"--groups={groups}",
                                     "/usr/bin/python3", "-c", CALLS_AS, daemon.socket, "1000"],
                                    capture_output=True, text=True, timeout=60)
            return result.stdout.strip() + result.stderr

        admitted = calls("4301")
        assert admitted == "1000", f"the group admits the caller: {admitted}"
        assert calls("4302") == "0", "without the group it is not admitted"
        # The trace works: a refresh writes the state file, which strace must see.
        assert "error" not in varlink_call(daemon.socket, "io.tokend.Broker.Refresh")[1]
        wait_for(lambda: ".session" in open(trace).read(), 10, "the state write in the trace")
    finally:
        tracer.terminate()
        tracer.wait(timeout=10)
    with open(trace) as f:
        lines = f.read().splitlines()
    lookups = [line for line in lines if "/etc/group" in line or "/etc/passwd" in line or "nscd" in line]
    print(f"strace saw {len(lines)} open/connect calls, {len(lookups)} user or group database look-ups")
    assert any(".session" in line for line in lines), "strace saw the refresh's state write"
    assert len(lookups) <= 5, lookups[:10]


def test_a_reload_that_takes_read_away_reaches_an_open_connection(server, make_tokend, workdir):
    """The loop gives a connection that repeats its GetToken the same reply
    again without asking: a reload that takes the caller's read away must end
    that on the very next call of the same open connection."""
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}).start()
    login(daemon, server)
    script = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(%r)\n"
              "for line in sys.stdin:\n"
              "    for _ in range(int(line)): s.sendall(b'{\"method\":\"io.tokend.Broker.GetToken\"}\\0')\n"
              "    replies = b''\n"
              "    while replies.count(b'\\0') < int(line): replies += s.recv(65536)\n"
              "    print(replies.split(b'\\0')[-2].decode(), flush=True)\n" % daemon.socket)
    caller = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=0", "--clear-groups", "/usr/bin/python3", "-c", script],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        caller.stdin.write("50\n")
        caller.stdin.flush()
        assert '"accessToken"' in caller.stdout.readline()  # 50 answers on one connection, most of them given again
        reload_with_access(daemon, "read-users = []\nread-groups = []")
        caller.stdin.write("1\n")
        caller.stdin.flush()
        assert "org.varlink.service.PermissionDenied" in caller.stdout.readline()
    finally:
        caller.kill()
        caller.wait()
