"""tokend-proxy in front of a test API on loopback, with the built tokend and
the real authorization server (rotation, reuse protection)."""
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import BIN, login, varlink_call, wait_for
from testapi import TestAPI

B = "io.tokend.Broker."


class ProxyProcess:
    def __init__(self, daemon, upstream, workdir, *extra, mode="0600"):
        self.path = os.path.join(workdir, "api.sock")
        self.log_path = os.path.join(workdir, "proxy.log")
        self.process = subprocess.Popen(
            [os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket, "--listen", f"unix:{self.path}",
             "--upstream", upstream, "--mode", mode, *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))
        wait_for(lambda: os.path.exists(self.path), 20, "the proxy's socket")

    def curl(self, path, *args, timeout=120):
        return subprocess.run(["curl", "-sS", "--unix-socket", self.path, "-o", "-", "-w", "\n%{http_code}", *args,
                               f"http://localhost{path}"], capture_output=True, text=True, timeout=timeout)

    def status(self, path, *args):
        return int(self.curl(path, *args).stdout.rsplit("\n", 1)[-1])

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def api():
    instance = TestAPI()
    yield instance
    instance.stop()


@pytest.fixture
def setup(server, make_tokend, api, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    proxy = ProxyProcess(daemon, api.url, workdir, "--timeout", "30")
    yield daemon, proxy
    proxy.stop()


def token_of(daemon):
    return varlink_call(daemon.socket, B + "GetToken")[1]["parameters"]["token"]


def test_100_curls_after_the_api_refuses_the_token_cause_one_refresh(server, api, setup):
    daemon, proxy = setup
    api.refuse(token_of(daemon)["accessToken"], callers=100)
    before = len(server.grants("refresh_token"))
    results = []

    def one():
        results.append(proxy.curl("/data"))
    threads = [threading.Thread(target=one) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    codes = [r.stdout.rsplit("\n", 1)[-1] for r in results]
    assert codes == ["200"] * 100, codes
    assert len(server.grants("refresh_token")) == before + 1, "one refresh for 100 requests that met a 401"
    new = token_of(daemon)["accessToken"]
    assert all(json.loads(r.stdout.rsplit("\n", 1)[0])["token"] == new for r in results)
    assert sum(1 for path, token, _ in api.seen if path == "/data" and token in api.refused) == 100, \
        "every request met the 401 and succeeded on its retry"
    # The client's own Authorization is replaced, never forwarded.
    body = proxy.curl("/data", "-H", "Authorization: Bearer mine").stdout.rsplit("\n", 1)[0]
    assert json.loads(body)["token"] == new


def test_cookies_the_api_sets_and_deletes_reach_tokend(api, setup):
    daemon, proxy = setup
    events = socket.socket(socket.AF_UNIX)
    events.connect(daemon.socket)
    events.sendall(json.dumps({"method": B + "Subscribe", "parameters": {}, "more": True}).encode() + b"\0")
    def jar():  # the session's cookies for the API (the authorization server's, on the same host, too)
        header = varlink_call(daemon.socket, B + "GetCookies", {"url": api.url + "/"})[1]["parameters"]["header"]
        return header.split("; ") if header else []
    assert "api=v1" not in jar()
    assert proxy.status("/set-cookie?name=api&value=v1") == 200
    assert "api=v1" in jar()
    body = json.loads(proxy.curl("/data", "-H", "Cookie: mine=1").stdout.rsplit("\n", 1)[0])
    assert "api=v1" in body["cookie"].split("; ") and "mine=1" not in body["cookie"], "the jar's cookies go upstream"
    assert proxy.status("/delete-cookie?name=api") == 200
    assert not [c for c in jar() if c.startswith("api=")]
    events.settimeout(2)
    feed = b""
    try:
        while feed.count(b"\0") < 3:
            feed += events.recv(65536)
    except OSError:
        pass
    kinds = [json.loads(f)["parameters"]["event"] for f in feed.split(b"\0") if f]
    assert kinds[:3] == ["status", "cookies", "cookies"], kinds


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])


def test_a_1_gib_download_and_a_2_gib_upload_pass_in_bounded_memory(setup, workdir):
    daemon, proxy = setup
    run = proxy.curl("/big?bytes=1073741824", "-o", "/dev/null", timeout=600)
    assert run.stdout.strip().endswith("200"), run.stdout + run.stderr
    size = subprocess.run(["curl", "-sS", "--unix-socket", proxy.path, "-o", "/dev/null", "-w", "%{size_download}",
                           "http://localhost/big?bytes=1073741824"], capture_output=True, text=True, timeout=600)
    assert size.stdout == "1073741824"
    upload = os.path.join(workdir, "two-gib")
    with open(upload, "wb") as f:
        f.truncate(2 << 30)
    sent = proxy.curl("/upload", "-T", upload, "-X", "POST", timeout=900)
    body, code = sent.stdout.rsplit("\n", 1)
    assert code == "200" and json.loads(body)["bytes"] == 2 << 30, sent.stdout[-300:] + sent.stderr
    peak = vm_hwm_kib(proxy.process.pid)
    print(f"1 GiB down and 2 GiB up through the proxy: peak RSS {peak / 1024:.1f} MiB")
    assert peak < 64 * 1024, f"peak RSS {peak} KiB"


def test_another_user_gets_403_and_no_token(api, setup, server, make_tokend, workdir):
    daemon, _ = setup
    os.chmod(workdir, 0o755)
    os.makedirs(os.path.join(workdir, "shared"))
    shared = ProxyProcess(daemon, api.url, os.path.join(workdir, "shared"), "--timeout", "3", mode="0666")
    try:
        other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "curl", "-sS",
                                "--unix-socket", shared.path, "-w", "\n%{http_code}", "http://localhost/data"],
                               capture_output=True, text=True, timeout=30)
        body, code = other.stdout.rsplit("\n", 1)
        assert code == "403" and "serves only the user it runs as" in body
        assert not any(path == "/data" and token for path, token, _ in api.seen), "nothing reached the API with a token"
        assert shared.status("/data") == 200, "its own user is served"
    finally:
        shared.stop()


def test_bad_input_gets_a_clear_status_and_the_proxy_goes_on(setup, workdir, server):
    daemon, proxy = setup
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(proxy.path)
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        s.settimeout(5)
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(proxy.path)
        try:
            s.sendall(b"GET /data HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
        except OSError:
            pass  # it may answer and close before the whole header is sent
        s.settimeout(5)
        assert s.recv(100).startswith(b"HTTP/1.1 4"), "a 1 MiB header is refused with a 4xx"
    assert proxy.status("/data") == 200, "the next request is served"
    # An upstream that refuses connections, and one that never answers.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    for name in ("r", "h"):
        os.makedirs(os.path.join(workdir, name))
    refusing = ProxyProcess(daemon, f"http://127.0.0.1:{port}", os.path.join(workdir, "r"), "--timeout", "3")
    hanging_socket = socket.socket()  # accepts (the kernel does) and never answers
    hanging_socket.bind(("127.0.0.1", 0))
    hanging_socket.listen(16)
    hanging = ProxyProcess(daemon, f"http://127.0.0.1:{hanging_socket.getsockname()[1]}", os.path.join(workdir, "h"),
                           "--timeout", "2")
    try:
        refused = refusing.curl("/data")
        assert refused.stdout.endswith("502") and "refused" in refused.stdout, refused.stdout
        started = time.time()
        late = hanging.curl("/data")
        assert late.stdout.endswith("504") and time.time() - started < 10, late.stdout
        assert "upstream failed" in hanging.logs() and "upstream failed" in refusing.logs()
        assert refusing.process.poll() is None and hanging.process.poll() is None
        assert proxy.status("/data") == 200
    finally:
        refusing.stop()
        hanging.stop()
        hanging_socket.close()
