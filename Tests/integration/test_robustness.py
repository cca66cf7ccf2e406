"""Hostile numbers and an unusable socket against the built tokend: a
provider's absurd lifetime neither crashes tokend nor its restart, a stored
record that once crashed it loads, and a socket that cannot be served ends
tokend at once, non-zero, naming the path and the reason."""
import json
import os
import socket
import subprocess
import time
from types import SimpleNamespace

import pytest

from conftest import BIN, Tokend, login, varlink_call
from faultproxy import FaultProxy

HUGE = 10_000_000_000_000  # what crashed tokend: Int overflow in issuedAt + expires_in
YEAR = 366 * 86_400  # SessionRecord.maximumLifetime


def lifetime_proxy(upstream, expires_in, set_cookie=None):
    """The fault proxy passing token requests to the real authorization server,
    with `expires_in` of its successful answers replaced (None: left as sent)
    and, if given, a Set-Cookie on every answer."""
    proxy = FaultProxy(upstream)
    if expires_in is not None:
        proxy.rewrite = lambda document: {**document, "expires_in": expires_in}
    if set_cookie:
        proxy.extra_headers = [("Set-Cookie", set_cookie)]
    return proxy


@pytest.fixture
def huge_lifetimes(server):
    proxy = lifetime_proxy(server.base, HUGE)
    yield proxy
    proxy.stop()


def call(daemon, method, **parameters):
    reply = varlink_call(daemon.socket, f"io.tokend.Broker.{method}", parameters)[1]
    assert "error" not in reply, reply
    return reply["parameters"]


def state_path(daemon):
    return os.path.join(daemon.state, "default.session")


def test_a_huge_expires_in_is_clamped_and_survives_a_restart(server, huge_lifetimes, make_tokend):
    endpoint = SimpleNamespace(token_url=huge_lifetimes.url + "/o/token/", base=server.base)
    daemon = make_tokend(endpoint).start()
    login(daemon, server)
    token = call(daemon, "GetToken")["token"]
    assert abs(token["expiresAt"] - time.time() - YEAR) < 30, token
    status = call(daemon, "GetStatus")["status"]
    assert "exceeds 366 days" in (status["lastError"] or ""), status
    assert daemon.process.poll() is None, "tokend is running"
    with open(state_path(daemon)) as f:
        assert json.load(f)["record"]["expiresAt"] == token["expiresAt"], "the clamped expiry is what is stored"

    # The stored state is what made every restart crash: it must serve again.
    assert daemon.stop() == 0
    daemon.start()
    assert call(daemon, "GetToken")["token"] == token
    assert daemon.process.poll() is None


def test_a_stored_expiry_near_int_max_loads_clamped(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    assert daemon.stop() == 0
    with open(state_path(daemon)) as f:
        envelope = json.load(f)
    envelope["record"]["expiresAt"] = 2**63 - 1  # written by a build that took any lifetime
    with open(state_path(daemon), "w") as f:
        json.dump(envelope, f)

    daemon.start()
    token = call(daemon, "GetToken")["token"]
    last_refresh = call(daemon, "GetStatus")["status"]["lastRefreshAt"]
    assert token["expiresAt"] == last_refresh + YEAR, token
    assert "stored expiry" in call(daemon, "GetStatus")["status"]["lastError"]
    # The fast path's reuse window comes from the same expiry: ask again on one connection.
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        for _ in range(3):
            s.sendall(json.dumps({"method": "io.tokend.Broker.GetToken", "parameters": {}}).encode() + b"\0")
            data = b""
            while not data.endswith(b"\0"):
                chunk = s.recv(65536)
                assert chunk, "tokend closed the connection"
                data += chunk
            assert json.loads(data[:-1])["parameters"]["token"] == token
    assert daemon.process.poll() is None


COOKIE_CAP = 400 * 86_400  # CookiePolicy.maximumLifetime


def test_a_max_age_beyond_int_neither_crashes_nor_persists_a_crash(server, make_tokend):
    # Max-Age overflowed Int on the add after the checked multiply: a trap on
    # the token endpoint's own Set-Cookie, and a crash loop once stored.
    proxy = lifetime_proxy(server.base, None, set_cookie="lb=1; Path=/; Max-Age=9223372036854775808")
    try:
        endpoint = SimpleNamespace(token_url=proxy.url + "/o/token/", base=server.base)
        daemon = make_tokend(endpoint).start()
        login(daemon, server)
        call(daemon, "Refresh")
        url = proxy.url + "/"
        cookies = {c["name"]: c for c in call(daemon, "GetCookies", url=url)["cookies"]}
        assert abs(cookies["lb"]["expiresAt"] - time.time() - COOKIE_CAP) < 60, cookies
        result = call(daemon, "ImportCookies", url=url, setCookie=[
            "big=1; Path=/; Max-Age=9223372036854775808", "gone=1; Path=/; Max-Age=-9223372036854775809",
            "huge=1; Path=/; Max-Age=99999999999999999999999999999"])
        assert result["applied"] == 3, result
        names = {c["name"] for c in call(daemon, "GetCookies", url=url)["cookies"]}
        assert {"lb", "big", "huge"} <= names and "gone" not in names, names
        assert daemon.process.poll() is None, "tokend is running"

        # What was stored must serve again after a restart.
        assert daemon.stop() == 0
        daemon.start()
        call(daemon, "Refresh")
        names = {c["name"] for c in call(daemon, "GetCookies", url=url)["cookies"]}
        assert {"lb", "big", "huge"} <= names, names
        assert daemon.process.poll() is None
    finally:
        proxy.stop()


def test_stored_counters_near_int_max_load_and_count_on(server, make_tokend):
    # generation += 1 at the first refresh, creationIndex + 1 and version + 1
    # in the jar: each trapped on such a file, at every start.
    daemon = make_tokend(server).start()
    login(daemon, server)
    call(daemon, "ImportCookies", url=server.base + "/", setCookie=["kept=1; Path=/; Max-Age=600"])
    assert daemon.stop() == 0
    with open(state_path(daemon)) as f:
        envelope = json.load(f)
    record = envelope["record"]
    record["generation"] = 2**63 - 1
    record["cookieVersion"] = 2**63 - 1
    assert record["cookies"], record
    for cookie in record["cookies"]:
        cookie["creationIndex"] = 2**63 - 1
    with open(state_path(daemon), "w") as f:
        json.dump(envelope, f)

    daemon.start()
    call(daemon, "Refresh")
    call(daemon, "ImportCookies", url=server.base + "/", setCookie=["added=1; Path=/"])
    names = [c["name"] for c in call(daemon, "GetCookies", url=server.base + "/")["cookies"]]
    assert "kept" in names and names[-1] == "added", names
    assert daemon.process.poll() is None
    assert daemon.stop() == 0
    with open(state_path(daemon)) as f:
        stored = json.load(f)["record"]
    assert 2**53 < stored["generation"] < 2**62 and 2**53 < stored["cookieVersion"] < 2**62, stored
    assert all(c["creationIndex"] < 2**53 for c in stored["cookies"]), stored["cookies"]
    daemon.start()
    call(daemon, "Refresh")
    assert daemon.process.poll() is None


def run_tokend(daemon, socket_path, timeout=30):
    """Runs tokend with `socket_path` as its socket until it exits; returns (status, stderr)."""
    with open(daemon.config) as f:
        config = f.read().replace(f'socket = "{daemon.socket}"', f'socket = "{socket_path}"')
    with open(daemon.config, "w") as f:
        f.write(config)
    finished = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config],
                              capture_output=True, text=True, timeout=timeout)
    return finished.returncode, finished.stderr


def test_a_socket_whose_directory_is_a_file_ends_tokend(server, make_tokend, workdir):
    blocker = os.path.join(workdir, "not-a-directory")
    with open(blocker, "w") as f:
        f.write("a regular file where the socket's directory should be\n")
    path = os.path.join(blocker, "sock")
    status, stderr = run_tokend(make_tokend(server), path)
    assert status == 73, (status, stderr)
    assert path in stderr and "not a directory" in stderr, stderr


def test_another_listener_at_the_socket_ends_tokend_and_is_left_alone(server, make_tokend, workdir):
    path = os.path.join(workdir, "taken.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    before = os.stat(path)
    try:
        status, stderr = run_tokend(make_tokend(server), path)
        assert status == 75, (status, stderr)
        assert path in stderr and "another program already listens there" in stderr, stderr
        after = os.stat(path)
        assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev), "the other listener's socket is untouched"
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)  # and still reaches it
            accepted, _ = listener.accept()
            accepted.close()
    finally:
        listener.close()


def test_a_second_tokend_on_the_same_socket_ends_and_the_first_serves_on(server, make_tokend, workdir):
    first = make_tokend(server).start()
    login(first, server)
    other = os.path.join(workdir, "second")
    os.makedirs(other)
    second = Tokend(other, server)  # its own state directory; the first one's socket
    status, stderr = run_tokend(second, first.socket)
    assert status == 75, (status, stderr)
    assert first.socket in stderr, stderr
    assert call(first, "GetToken")["token"]["accessToken"]
    assert first.process.poll() is None


def test_tokenctl_help_lists_every_exit_code_it_returns():
    import re
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "Sources", "TokenctlProgram", "Tokenctl.swift")) as f:
        codes = {int(n) for n in re.findall(r"static let \w+: Int32 = (\d+)", f.read())}
    assert {9, 127} <= codes, codes
    help_text = subprocess.run([os.path.join(BIN, "tokenctl"), "--help"], capture_output=True, text=True).stdout
    listed = " ".join(help_text.split("Exit codes:")[1].split())
    assert [c for c in sorted(codes) if not re.search(rf"(?:^|, ){c} ", listed)] == [], listed


def test_an_inherited_socket_that_cannot_be_served_ends_tokend(server, make_tokend, workdir):
    """Socket activation handing tokend something its loop cannot watch (a
    regular file): the loop's error ends tokend rather than being dropped."""
    daemon = make_tokend(server)
    path = os.path.join(workdir, "not-a-socket")
    with open(path, "w") as f:
        f.write("x")
    # The shell opens the file as fd 3 and becomes tokend, whose pid LISTEN_PID names.
    finished = subprocess.run(
        ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=varlink exec "$0" --config "$1" 3<"$2"',
         os.path.join(BIN, "tokend"), daemon.config, path],
        capture_output=True, text=True, timeout=30)
    assert finished.returncode == 73, (finished.returncode, finished.stderr)
    assert "Operation not permitted" in finished.stderr, finished.stderr
