"""tokend as systemd expects it, without systemd as PID 1: units checked by
systemd-analyze, socket activation by systemd-socket-activate, sd_notify
messages read from a test-owned NOTIFY_SOCKET, journal entries read from a
private journal socket in a mount namespace."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import BIN, ROOT, login, read_frame, varlink_call, wait_for

UNITS = os.path.join(ROOT, "systemd")
HERE = os.path.dirname(os.path.abspath(__file__))
MESSAGE_IDS = {
    "started": "85ecaa8925d04b668c5315101133b0fc",
    "refreshed": "f7ce51604e3c439ab1f73185b3f8ae12",
    "logged out": "839fae5a196749609a798c2c7dbba5fd",
    "stopping": "2f77fea7f3d44e64a9a49b20c697e90d",
}


def unit_root(workdir, units, subdir):
    """A root holding systemd's unit library, our units and the binaries the
    units name, so that `verify` checks them as installed."""
    root = os.path.join(workdir, "root")
    shutil.copytree("/lib/systemd/system", os.path.join(root, "usr/lib/systemd/system"), symlinks=True)
    os.makedirs(os.path.join(root, "usr/local/bin"))
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(os.path.join(BIN, "tokend"), os.path.join(root, "usr/local/bin/tokend"))
    shutil.copy("/bin/kill", os.path.join(root, "bin/kill"))
    target = os.path.join(root, subdir)
    os.makedirs(target)
    for unit in units:
        shutil.copy(unit, target)
    # Documentation= names our man pages; verify looks them up with man(1).
    for page, section in (("tokend.8", "man8"), ("tokend.toml.5", "man5"), ("tokenctl.1", "man1")):
        os.makedirs(os.path.join(root, "man", section), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "man", page), os.path.join(root, "man", section))
    return root


def verify(root, *units):
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *units], capture_output=True, text=True,
                          env=dict(os.environ, MANPATH=os.path.join(root, "man")))


def test_units_verify_cleanly_and_are_hardened(workdir):
    units = [os.path.join(UNITS, n) for n in ("tokend.socket", "tokend.service")]
    root = unit_root(workdir, units, "etc/systemd/system")
    result = verify(root, "tokend.socket", "tokend.service")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", os.path.join(UNITS, "tokend.service")],
                            capture_output=True, text=True)
    score = float(result.stdout.split("Overall exposure level for tokend.service:")[1].split()[0])
    print(f"systemd-analyze security exposure: {score}")
    assert score <= 2.0


def test_user_units_verify_cleanly(workdir):
    units = [os.path.join(UNITS, "user", n) for n in ("tokend.socket", "tokend.service")]
    root = unit_root(workdir, units, "etc/systemd/system")
    result = verify(root, "tokend.socket", "tokend.service")
    assert result.returncode == 0 and result.stderr == "", result.stderr


class Notifications:
    def __init__(self, path):
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(path)
        self.socket.settimeout(0.1)
        self.path = path
        self.messages = []

    def collect(self):
        while True:
            try:
                self.messages.append(self.socket.recv(4096).decode())
            except socket.timeout:
                return self.messages

    def wait_for(self, key, after=0, timeout=15):
        def found():
            self.collect()
            return any(key in m.split("\n") or any(l.startswith(key) for l in m.split("\n"))
                       for m in self.messages[after:])
        wait_for(found, timeout, key)
        return next(i for i, m in enumerate(self.messages) if i >= after and
                    any(l == key or l.startswith(key) for l in m.split("\n")))


def test_socket_activation_notify_watchdog_reload_and_stop(server, make_tokend, workdir):
    daemon = make_tokend(server)
    notify = Notifications(os.path.join(workdir, "notify"))
    process = subprocess.Popen(
        ["systemd-socket-activate", "-l", daemon.socket, "--fdname=varlink",
         "-E", f"NOTIFY_SOCKET={notify.path}", "-E", "WATCHDOG_USEC=1000000",
         os.path.join(BIN, "tokend"), "--config", daemon.config],
        stdout=open(daemon.log_path, "a"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.exists(daemon.socket), 10, "activation socket")
        assert notify.collect() == [], "tokend is not started before the first connection"
        started = time.time()
        # The call that triggers activation is answered.
        raw, reply = varlink_call(daemon.socket, "io.tokend.Broker.GetStatus")
        first_reply = time.time() - started
        assert reply["parameters"]["status"]["session"] == "default"
        ready = notify.wait_for("READY=1")
        assert "STATUS=1 session: 1 login required" in notify.messages[ready]
        watchdog = notify.wait_for("WATCHDOG=1", after=ready)
        notify.wait_for("WATCHDOG=1", after=watchdog + 1)  # keeps pinging
        login(daemon, server)
        # A good reload: a session is added, the existing one keeps its tokens.
        before = varlink_call(daemon.socket, "io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
        with open(daemon.config, "a") as f:
            f.write(f'[sessions.second]\ntoken-endpoint = "{server.token_url}"\nclient-id = "tokend-test"\n'
                    'client-auth = "none"\n')
        process.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1", after=ready + 1)
        assert any(l.startswith("MONOTONIC_USEC=") for l in notify.messages[reloading].split("\n"))
        ready_again = notify.wait_for("READY=1", after=reloading)
        names = [s["session"] for s in varlink_call(daemon.socket, "io.tokend.Broker.ListSessions")[1]["parameters"]["sessions"]]
        assert names == ["default", "second"]
        after = varlink_call(daemon.socket, "io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
        assert after["generation"] == before["generation"] and after["refreshes"] == before["refreshes"]
        assert after["state"] == "active"
        # A bad reload is rejected: old configuration kept, STATUS says so.
        with open(daemon.config, "a") as f:
            f.write("bogus = 1\n")
        process.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1", after=ready_again + 1)
        rejected = notify.wait_for("READY=1", after=reloading)
        assert "last reload failed, old configuration kept" in notify.messages[rejected]
        assert "sessions.second.bogus: unknown key" in notify.messages[rejected]
        assert len(varlink_call(daemon.socket, "io.tokend.Broker.ListSessions")[1]["parameters"]["sessions"]) == 2
        # Removing a session stops it; the remaining one is untouched.
        with open(daemon.config) as f:
            text = f.read()
        with open(daemon.config, "w") as f:
            f.write(text[:text.index("[sessions.second]")])
        process.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1", after=rejected + 1)
        rejected = notify.wait_for("READY=1", after=reloading)
        assert "last reload failed" not in notify.messages[rejected]
        names = [s["session"] for s in varlink_call(daemon.socket, "io.tokend.Broker.ListSessions")[1]["parameters"]["sessions"]]
        assert names == ["default"]
        assert varlink_call(daemon.socket, "io.tokend.Broker.GetStatus")[1]["parameters"]["status"]["generation"] == before["generation"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        stopping = notify.wait_for("STOPPING=1", after=rejected)
        order = [next(k for k in ("READY=1", "WATCHDOG=1", "RELOADING=1", "STOPPING=1") if k in m.split("\n"))
                 for m in notify.messages if any(k in m.split("\n") for k in ("READY=1", "WATCHDOG=1", "RELOADING=1", "STOPPING=1"))]
        collapsed = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k or k != "WATCHDOG=1"]
        filtered = [k for k in collapsed if k != "WATCHDOG=1"]
        assert filtered == ["READY=1"] + ["RELOADING=1", "READY=1"] * 3 + ["STOPPING=1"], order
        assert order.index("WATCHDOG=1") > order.index("READY=1")
        print(f"socket-activated first reply after {first_reply * 1000:.0f} ms")
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize("what", ["actor", "server loop"])
def test_hung_actor_or_front_loop_stops_watchdog_pings(server, make_tokend, workdir, what):
    # SIGUSR2 (test hooks) hangs the first session actor; SIGUSR1 the thread that serves the socket.
    daemon = make_tokend(server)
    notify = Notifications(os.path.join(workdir, "notify"))
    env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="600000", TOKEND_TEST_HOOKS="1")
    process = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", daemon.config], env=env,
                               stdout=open(daemon.log_path, "a"), stderr=subprocess.STDOUT)
    try:
        ready = notify.wait_for("READY=1")
        notify.wait_for("WATCHDOG=1", after=ready)
        if what == "server loop":
            daemon.call("io.tokend.Broker.GetStatus")  # served before the hang
            process.send_signal(signal.SIGUSR1)
            wait_for(lambda: "server loop hanging on purpose" in daemon.logs(), 10, "hang")
            with socket.socket(socket.AF_UNIX) as s:  # the loop is really stuck: no answer
                s.settimeout(1)
                s.connect(daemon.socket)
                s.sendall(b'{"method":"org.varlink.service.GetInfo"}\0')
                with pytest.raises(socket.timeout):
                    s.recv(1)
        else:
            process.send_signal(signal.SIGUSR2)
            wait_for(lambda: "hanging on purpose" in daemon.logs(), 10, "hang")
        wait_for(lambda: "health check failed" in daemon.logs(), 10, "the failed health check")
        notify.collect()
        count = len(notify.messages)
        time.sleep(2)  # the situation: 2 s in which a healthy tokend pings six times (each half of WATCHDOG_USEC)
        later = notify.collect()[count:]
        assert not any("WATCHDOG=1" in m.split("\n") for m in later), later
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is needed for a private journal socket")
def test_journal_entries_have_fields_and_no_tokens(server, make_tokend, workdir):
    daemon = make_tokend(server, daemon={"log-target": '"journal"'})
    status, grant = server.password_grant()
    token_file = os.path.join(workdir, "refresh-token")
    with open(token_file, "w") as f:
        f.write(grant["refresh_token"])
    out = os.path.join(workdir, "journal.json")
    tokens_out = os.path.join(workdir, "tokens")
    scenario = [sys.executable, os.path.join(HERE, "journal_scenario.py"), os.path.join(BIN, "tokend"),
                os.path.join(BIN, "tokenctl"), daemon.config, daemon.socket, token_file, tokens_out]
    inner = " ".join([sys.executable, os.path.join(HERE, "journal_capture.py"), out, "--"] + scenario)
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mkdir -p /run/systemd/journal && mount -t tmpfs tmpfs /run/systemd/journal && exec {inner}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    entries = json.load(open(out))
    by_id = {e.get("MESSAGE_ID"): e for e in entries}
    for message, message_id in MESSAGE_IDS.items():
        entry = by_id.get(message_id)
        assert entry is not None, f"no journal entry for {message!r}"
        assert entry["MESSAGE"] == message
    refreshed = by_id[MESSAGE_IDS["refreshed"]]
    for field in ("PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "TOKEND_SESSION",
                  "TOKEND_GENERATION"):
        assert field in refreshed, field
    assert refreshed["SYSLOG_IDENTIFIER"] == "tokend" and refreshed["PRIORITY"] == "6"
    assert refreshed["TOKEND_SESSION"] == "default"
    login_entry = next(e for e in entries if e["MESSAGE"] == "login requested")
    assert login_entry["TOKEND_PEER_UID"] == str(os.getuid()) and login_entry["TOKEND_PEER_PID"].isdigit()
    assert refreshed["CODE_FILE"].endswith(".swift") and refreshed["CODE_LINE"].isdigit()
    secrets = [grant["refresh_token"]] + [t for t in open(tokens_out).read().split("\n") if t]
    text = json.dumps(entries)
    assert len(secrets) == 3
    for secret in secrets:
        assert secret not in text, "a token reached the journal"
