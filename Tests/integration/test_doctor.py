# Over 90 s of `make test` (docs/testing.md): 14 set-ups, each a tokend and a provider of its own, one of them
# a tokend that accepts and never answers, waited out to doctor's deadline (97 s summed on the busy 2-core
# machine).
"""tokenctl doctor against the built tokend and the real authorization server: a
healthy set-up passes (exit 0); each problem, made for real in turn, fails its
check (exit 1) and the line names the fix."""
import json
import os
import re
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator

import pytest

from conftest import BIN, CLIENT_ID, AuthServer, Tokend, login, wait_for
from discovery import Discovery

LINE = re.compile(r"^(ok|warn|FAIL|skip) +([^:]+): (.*)$")


class Doctor:
    """One run of `tokenctl doctor`: its exit status and its lines by check."""

    def __init__(self, daemon: Tokend, *args: str, env: dict[str, str] | None = None) -> None:
        command = [os.path.join(BIN, "tokenctl"), "doctor", "--socket", daemon.socket, "--config", daemon.config, *args]
        run = subprocess.run(command, capture_output=True, text=True, timeout=90, env=env or quiet_env(daemon))
        self.status = run.returncode
        self.output = run.stdout + run.stderr
        self.lines: dict[str, tuple[str, str]] = {}
        for line in run.stdout.splitlines():
            match = LINE.match(line)
            assert match, f"not a doctor line: {line!r}\n{self.output}"
            self.lines[match.group(2)] = (match.group(1), match.group(3))

    def outcome(self, check: str) -> str:
        assert check in self.lines, f"no {check!r} line:\n{self.output}"
        return self.lines[check][0]

    def says(self, check: str) -> str:
        self.outcome(check)
        return self.lines[check][1]


def quiet_env(daemon: Tokend) -> dict[str, str]:
    """This user's environment with a home of the test's own (no browser manifests of the machine's user)."""
    home = os.path.join(daemon.directory, "home")
    os.makedirs(home, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "TOKEND_SOCKET", "TOKEND_CONFIG")}
    env["HOME"] = home
    return env


def generate_key(path: str) -> None:
    key = subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True, text=True,
                         check=True).stdout
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(key)


@pytest.fixture
def oidc_server(workdir) -> Iterator[AuthServer]:
    """The authorization server with OpenID Connect on: it serves a discovery document."""
    instance = AuthServer(os.path.join(workdir, "as"), extra=["--oidc"])
    yield instance
    if instance.process.poll() is None:  # a test may have stopped it
        instance.stop()


@pytest.fixture
def healthy(oidc_server, make_tokend, workdir) -> Tokend:
    """A logged-in tokend with a sealed state, an issuer the doctor asks, and a token file."""
    server = oidc_server
    key = os.path.join(workdir, "state.key")
    generate_key(key)
    runtime = os.path.join(workdir, "run")
    daemon = make_tokend(
        server, daemon={"runtime-directory": json.dumps(runtime), "state-key-file": json.dumps(key)},
        issuer=json.dumps(server.issuer), **{"token-files": '[{ path = "app/token", group = "0", mode = "0640" }]'})
    daemon.start()
    login(daemon, server)
    wait_for(lambda: os.path.exists(os.path.join(runtime, "app", "token")), 5, "the token file")
    return daemon


def test_a_healthy_set_up_passes(healthy):
    doctor = Doctor(healthy)
    assert doctor.status == 0, doctor.output
    assert [line for line in doctor.output.splitlines() if line.startswith("FAIL")] == []
    for check in ("configuration", "socket", "socket mode", "socket group", "state directory", "encryption at rest",
                  "session default", "provider (default)", "clock (default)", "token file (default)"):
        assert doctor.outcome(check) == "ok", doctor.output
    assert doctor.says("encryption at rest").startswith("sealed with the key in ")
    assert re.search(r"/.well-known/\S+ answers \(HTTP 200\)$", doctor.says("provider (default)"))
    assert doctor.says("session default").startswith("active — token valid until ")
    assert doctor.outcome("browser bridge") == "skip"
    assert doctor.says("unit hardening") == "systemd is not PID 1 here", "this machine runs no systemd as PID 1"


def test_a_configuration_that_does_not_parse_is_named_with_its_key(healthy):
    with open(healthy.config) as f:
        text = f.read()
    with open(healthy.config, "w") as f:
        f.write(text.replace("[daemon]\n", '[daemon]\nsocket-mode = "0999"\n'))
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("configuration") == "FAIL"
    assert "daemon.socket-mode" in doctor.says("configuration")
    assert f"tokend --check-config --config {healthy.config}" in doctor.says("configuration")


def test_a_wrong_socket_mode_and_group_are_named(healthy):
    os.chmod(healthy.socket, 0o666)
    os.chown(healthy.socket, -1, 65534)
    assert stat.S_IMODE(os.stat(healthy.socket).st_mode) == 0o666 and os.stat(healthy.socket).st_gid == 65534
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("socket") == "ok", "it still answers"
    assert doctor.outcome("socket mode") == "FAIL"
    assert f"fix: chmod 0660 {healthy.socket}" in doctor.says("socket mode")
    assert doctor.outcome("socket group") == "FAIL"
    assert f"fix: chgrp root {healthy.socket}" in doctor.says("socket group")


def test_a_stopped_tokend_is_named(healthy):
    healthy.stop()
    # The socket file stays when tokend is killed; here it was removed at a clean stop, or refuses.
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("socket") == "FAIL"
    assert "systemctl" in doctor.says("socket")
    assert doctor.outcome("session default") == "skip"


def test_a_state_directory_owned_by_another_user_is_named(healthy):
    os.chown(healthy.state, 65534, 65534)
    try:
        assert os.stat(healthy.state).st_uid == 65534
        doctor = Doctor(healthy)
    finally:
        os.chown(healthy.state, 0, 0)
    assert doctor.status == 1
    assert doctor.outcome("state directory") == "FAIL"
    assert "belongs to nobody, tokend runs as root" in doctor.says("state directory")
    assert f"fix: chown -R root: {healthy.state}" in doctor.says("state directory")


def test_a_state_key_others_may_read_is_named(healthy):
    key = os.path.join(healthy.directory, "state.key")
    os.chmod(key, 0o644)
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("encryption at rest") == "FAIL"
    assert f"fix: chmod 0600 {key}" in doctor.says("encryption at rest")


def test_plain_state_files_are_a_warning_naming_the_state_key(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    with open(os.path.join(daemon.state, "default.session")) as f:
        assert json.load(f)["encryption"] == "none"
    doctor = Doctor(daemon)
    assert doctor.status == 0, doctor.output
    assert doctor.outcome("encryption at rest") == "warn"
    assert "tokend --generate-state-key | systemd-creds encrypt" in doctor.says("encryption at rest")


def test_a_provider_that_is_down_is_named(healthy, oidc_server):
    server = oidc_server
    server.stop()
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("provider (default)") == "FAIL"
    assert "refuses or drops the connection" in doctor.says("provider (default)")
    assert "fix: start the provider" in doctor.says("provider (default)")


@pytest.fixture
def skewed_provider(server) -> Iterator[Discovery]:
    """A provider whose HTTP Date is 300 s behind the real time."""
    provider = Discovery({"token_endpoint": server.token_url}, skew=300)
    yield provider
    provider.close()


def test_a_skewed_clock_is_found_by_the_providers_date(server, make_tokend, workdir, skewed_provider):
    sessions = {"skewed": {"issuer": skewed_provider.issuer, "client-id": CLIENT_ID,
                           "client-secret-file": os.path.join(workdir, "client-secret")}}
    daemon = make_tokend(server, sessions=sessions).start()
    doctor = Doctor(daemon, "--session", "skewed")
    assert "/.well-known/openid-configuration" in skewed_provider.asked
    assert doctor.status == 1
    assert doctor.outcome("provider (skewed)") == "ok"
    assert doctor.outcome("clock (skewed)") == "FAIL"
    assert re.search(r"this machine's clock is (299|300|301) s ahead of the provider's", doctor.says("clock (skewed)"))
    assert "fix: turn on time synchronisation: timedatectl set-ntp true" in doctor.says("clock (skewed)")
    assert "session default" not in doctor.lines, "--session checks that session alone"


def test_a_token_file_with_another_mode_or_gone_is_named(healthy):
    path = os.path.join(healthy.directory, "run", "app", "token")
    os.chmod(path, 0o644)
    doctor = Doctor(healthy)
    assert doctor.status == 1
    assert doctor.outcome("token file (default)") == "FAIL"
    assert f"fix: chmod 0640 {path}" in doctor.says("token file (default)")
    os.unlink(path)
    doctor = Doctor(healthy)
    assert doctor.outcome("token file (default)") == "FAIL"
    assert "missing while the session has a token" in doctor.says("token file (default)")
    assert "fix: tokenctl refresh --session default" in doctor.says("token file (default)")


def test_a_session_that_needs_a_login_names_the_command(server, make_tokend):
    daemon = make_tokend(server, **{"device-authorization-endpoint": json.dumps(server.base + "/o/device-authorization/")}).start()
    assert json.loads(daemon.ctl("status", "--json").stdout)["state"] == "loginRequired"
    doctor = Doctor(daemon)
    assert doctor.status == 1
    assert doctor.outcome("session default") == "FAIL"
    assert re.match(r"login required( since (\d{4}-\d\d-\d\d )?\d\d:\d\d)? — not logged in yet", doctor.says("session default"))
    assert doctor.says("session default").endswith("fix: tokenctl login --device")


def test_the_browser_bridge_registration_is_checked_for_this_user(server, make_tokend):
    daemon = make_tokend(server, **{"web-origins": '["https://app.example.com"]'}).start()
    login(daemon, server)
    env = quiet_env(daemon)
    doctor = Doctor(daemon, env=env)
    assert doctor.outcome("browser bridge") == "warn"
    assert "fix: tokenctl browser-bridge --browser chromium" in doctor.says("browser bridge")
    manifest = os.path.join(env["HOME"], ".mozilla", "native-messaging-hosts", "io.tokend.bridge.json")
    os.makedirs(os.path.dirname(manifest))
    with open(manifest, "w") as f:
        json.dump({"name": "io.tokend.bridge", "path": "/nonexistent/tokend-native-host", "type": "stdio",
                   "allowed_extensions": ["bridge@tokend.io"]}, f)
    doctor = Doctor(daemon, env=env)
    assert doctor.status == 1
    assert doctor.outcome("browser bridge") == "FAIL"
    assert "/nonexistent/tokend-native-host" in doctor.says("browser bridge")
    assert doctor.says("browser bridge").endswith("fix: tokenctl browser-bridge --browser firefox")
    fixed = subprocess.run([os.path.join(BIN, "tokenctl"), "browser-bridge", "--browser", "firefox"], env=env,
                           capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    doctor = Doctor(daemon, env=env)
    assert doctor.outcome("browser bridge") == "ok" and doctor.says("browser bridge") == "registered for firefox"
    assert doctor.status == 0, doctor.output


def non_loopback_address() -> str:
    """An address of this host's that is not loopback (the fleet store's host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = probe.getsockname()[0]
        except OSError:
            pytest.skip("this host has no non-loopback IPv4 address")
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    return address


def test_a_fleet_store_without_tls_is_named(server, make_tokend, workdir):
    host = non_loopback_address()
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    sessions = {"fleet": {"token-endpoint": server.token_url, "client-id": CLIENT_ID,
                          "client-secret-file": os.path.join(workdir, "client-secret"),
                          "shared-store": f"postgresql://tokend@{host}:{port}/tokend?sslmode=disable"}}
    key = os.path.join(workdir, "state.key")
    generate_key(key)
    daemon = make_tokend(server, daemon={"state-key-file": json.dumps(key)}, sessions=sessions).start()
    try:
        doctor = Doctor(daemon, "--session", "fleet")
    finally:
        listener.close()
    assert doctor.status == 1
    assert doctor.outcome("fleet store sslmode (fleet)") == "FAIL"
    assert doctor.says("fleet store sslmode (fleet)").startswith(f"sslmode=disable to {host}")
    assert "fix: sslmode=verify-full in sessions.fleet.shared-store" in doctor.says("fleet store sslmode (fleet)")
    assert doctor.says("fleet store (fleet)") == f"{host}:{port} accepts connections"
    closed = Doctor(daemon, "--session", "fleet")
    assert closed.outcome("fleet store (fleet)") == "FAIL"
    assert "Connection refused" in closed.says("fleet store (fleet)") and "pg_hba.conf" in closed.says("fleet store (fleet)")


def test_a_tokend_that_accepts_but_does_not_answer_is_named(healthy):
    """A stopped (SIGSTOP) tokend: the kernel still queues connections, so only a reply shows it works."""
    os.kill(healthy.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        doctor = Doctor(healthy)
        waited = time.monotonic() - started
        status = subprocess.run([os.path.join(BIN, "tokenctl"), "status", "--socket", healthy.socket],
                                capture_output=True, text=True, timeout=60)
    finally:
        os.kill(healthy.process.pid, signal.SIGCONT)
    assert doctor.status == 1, doctor.output
    assert doctor.outcome("socket") == "FAIL"
    assert doctor.says("socket").startswith("tokend accepts but does not answer within 5 s")
    assert "fix: systemctl restart tokend; journalctl -u tokend" in doctor.says("socket")
    assert doctor.outcome("session default") == "skip"
    assert waited < 60, "the doctor gave up waiting rather than hang"
    assert status.returncode == 3, status.stdout + status.stderr
    assert "accepts but does not answer within 5 s" in status.stderr
    assert Doctor(healthy).outcome("socket") == "ok", "once continued, it answers again"
