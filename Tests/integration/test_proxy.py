# Over 90 s of `make test` (docs/testing.md): thousands of pipelined refusals read at the client's pace, a 256
# MiB download and a 512 MiB upload in bounded memory, 100 curls at once (173 s summed on the busy 2-core
# machine).
"""tokend-proxy in front of a test API on loopback, with the built tokend and
the real authorization server (rotation, reuse protection)."""
import http.client
import http.server
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import types

import pytest

from conftest import BIN, ROOT, free_port, login, varlink_call, wait_for
from testapi import TestAPI

B = "io.tokend.Broker."


def request(port, method, target, headers, body=None):
    """One request to 127.0.0.1:port exactly as given (Host included, the target not normalized):
    the status and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body or b"")))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


class ProxyProcess:
    """The built tokend-proxy on a Unix socket in `workdir`, or with `port` on tcp:127.0.0.1:port."""

    def __init__(self, daemon, upstream, workdir, *extra, mode="0600", port=None, prefix=()):
        self.path = os.path.join(workdir, "api.sock")
        self.port = port
        self.log_path = os.path.join(workdir, "proxy.log")
        listen = f"tcp:127.0.0.1:{port}" if port else f"unix:{self.path}"
        self.process = subprocess.Popen(
            [*prefix, os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket, "--listen", listen,
             "--upstream", upstream, "--mode", mode, *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))
        wait_for(self.listening, 20, "the proxy's socket")

    def listening(self):
        """The proxy said it listens (its socket is bound and listening by then). Not a probe connection:
        one the test closed is counted against --max-connections until the proxy has read its end."""
        if self.process.poll() is not None:
            raise AssertionError(f"tokend-proxy exited with {self.process.returncode}: {self.logs()}")
        return any(line.endswith(" listening") for line in self.logs().splitlines())

    def request(self, method, target, headers, body=None):
        return request(self.port, method, target, headers, body)

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


class UnixHTTPConnection(http.client.HTTPConnection):
    """A keep-alive HTTP connection to a Unix socket."""

    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(self.unix_path)


def get_json(connection, target):
    connection.request("GET", target)
    response = connection.getresponse()
    body = response.read()
    assert response.status == 200, (response.status, body)
    return json.loads(body)


def test_the_token_and_cookies_come_from_tokend_s_events_not_a_call_per_request(server, make_tokend, api, workdir):
    """The proxy asks tokend once, then follows its event stream: 200 requests cost no further GetToken
    or GetCookies; a refresh and a cookie another client causes reach the next request without a 401."""
    daemon = make_tokend(server).start()
    login(daemon, server)
    spy_path, capture = os.path.join(workdir, "spy.sock"), os.path.join(workdir, "spy.bin")
    spy = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests", "integration", "socketspy.py"), spy_path,
                            daemon.socket, capture])
    wait_for(lambda: os.path.exists(spy_path), 10, "the spy's socket")
    proxy = ProxyProcess(types.SimpleNamespace(socket=spy_path), api.url, workdir)
    try:
        def sent(method):
            with open(capture, "rb") as f:
                return f.read().count(f'"method":"io.tokend.Broker.{method}"'.encode())
        wait_for(lambda: sent("Subscribe") == 1, 10, "the proxy's subscription")
        connection = UnixHTTPConnection(proxy.path)
        first = token_of(daemon)["accessToken"]
        assert get_json(connection, "/data")["token"] == first
        asked = sent("GetToken"), sent("GetCookies")
        assert asked == (1, 1), asked
        for _ in range(200):
            assert get_json(connection, "/data")["token"] == first
        assert (sent("GetToken"), sent("GetCookies")) == asked, "200 requests, no call to tokend"
        # Another client forces a refresh: the proxy's next requests carry the new token, no 401 needed.
        refreshed = varlink_call(daemon.socket, B + "Refresh")[1]["parameters"]["token"]["accessToken"]
        assert refreshed != first
        wait_for(lambda: get_json(connection, "/data")["token"] == refreshed, 5, "the refreshed token upstream")
        assert not any(token == first for path, token, _ in api.seen[-1:]), "the stale token is no longer sent"
        # Another client puts a cookie in the jar: the next requests carry it.
        imported = varlink_call(daemon.socket, B + "ImportCookies",
                                {"url": api.url + "/", "setCookie": ["elsewhere=v2; Path=/"]})[1]
        assert imported["parameters"]["applied"] == 1, imported
        wait_for(lambda: "elsewhere=v2" in (get_json(connection, "/data")["cookie"] or ""), 5, "the cookie upstream")
        assert not [path for path, token, _ in api.seen if token in api.refused], "no request met a 401"
        connection.close()
    finally:
        proxy.stop()
        spy.terminate()
        spy.wait(10)


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])


def test_a_256_mib_download_and_a_512_mib_upload_pass_in_bounded_memory(setup, workdir):
    # Four and eight times the memory bound: a proxy that held a body whole could not stay under it. Each
    # way the receiver takes 50 MB/s, slower than the sender sends: the proxy must stop reading the sender.
    daemon, proxy = setup
    down = subprocess.run(["curl", "-sS", "--limit-rate", "50M", "--unix-socket", proxy.path, "-o", "/dev/null",
                           "-w", "%{http_code} %{size_download}", "http://localhost/big?bytes=268435456"],
                          capture_output=True, text=True, timeout=300)
    assert down.stdout == "200 268435456", down.stdout + down.stderr
    upload = os.path.join(workdir, "half-gib")
    with open(upload, "wb") as f:
        f.truncate(512 << 20)
    sent = proxy.curl("/upload?rate=50", "-T", upload, "-X", "POST", timeout=300)
    body, code = sent.stdout.rsplit("\n", 1)
    assert code == "200" and json.loads(body)["bytes"] == 512 << 20, sent.stdout[-300:] + sent.stderr
    peak = vm_hwm_kib(proxy.process.pid)
    print(f"256 MiB down and 512 MiB up through the proxy: peak RSS {peak / 1024:.1f} MiB")
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


CHUNKED_ANSWER = [b"part one,", b" part two"]


class RecordingAPI:
    """An upstream that notes every request (method, target as received, bearer token) as its head
    arrives, before reading its body, and answers 200 with what it saw; over TLS with `tls`
    (certificate and key files), as https://localhost:PORT."""

    def __init__(self, tls=None):
        self.seen = []
        self.lock = threading.Lock()
        # A request for /held is answered once this is set.
        self.gate = threading.Event()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_any(self):
                authorization = self.headers.get("Authorization", "")
                token = authorization[7:] if authorization.startswith("Bearer ") else None
                with api.lock:
                    api.seen.append((self.command, self.path, token))
                length, received = int(self.headers.get("Content-Length", 0)), 0
                while received < length:
                    piece = self.rfile.read(min(1 << 16, length - received))
                    if not piece:
                        return
                    received += len(piece)
                if self.path.endswith("/held"):
                    api.gate.wait()
                if self.path.endswith("/chunked"):  # an answer of unknown length, in two chunks
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in CHUNKED_ANSWER:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body = json.dumps({"path": self.path, "token": token, "bytes": received}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_any

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.url = f"https://localhost:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.gate.set()
        self.server.shutdown()


@pytest.fixture
def recording():
    instance = RecordingAPI()
    yield instance
    instance.stop()


@pytest.fixture
def tcp_proxy(server, make_tokend, recording, workdir):
    """A logged-in tokend and tokend-proxy on tcp:127.0.0.1 in front of the recording API under /api."""
    daemon = make_tokend(server).start()
    login(daemon, server)
    proxy = ProxyProcess(daemon, recording.url + "/api", workdir, "--timeout", "30", "--body-timeout", "3",
                         port=free_port())
    yield daemon, proxy
    proxy.stop()


def test_on_tcp_no_web_page_gets_a_request_through(recording, tcp_proxy):
    daemon, proxy = tcp_proxy
    port, other = proxy.port, free_port()
    own = f"127.0.0.1:{port}"
    refused = [
        (421, {"Host": f"rebind.attacker.example:{port}"}),  # what a page sends after rebinding its name
        (421, {"Host": "rebind.attacker.example"}),
        (421, {"Host": f"127.0.0.1:{other}"}),
        (421, {"Host": "127.0.0.1"}),  # the port may be left out only for 80
        (403, {"Host": own, "Origin": "https://evil.example"}),  # a cross-site no-cors POST
        (403, {"Host": own, "Origin": f"http://127.0.0.1:{other}"}),  # another loopback port: same-site, another origin
        (403, {"Host": own, "Origin": "null"}),
        (403, {"Host": own, "Sec-Fetch-Site": "cross-site"}),
        (403, {"Host": own, "Sec-Fetch-Site": "same-site"}),
    ]
    for status, headers in refused:
        code, body = proxy.request("POST", "/data", {"Content-Type": "text/plain", **headers}, b"x=1")
        assert code == status and "tokend-proxy:" in body, (headers, code, body)
    assert recording.seen == [], "no refused request reached the upstream"
    served = [
        {"Host": own},
        {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Host": own, "Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"},
        {"Host": own, "Sec-Fetch-Site": "none"},  # the user typed the address
    ]
    token = token_of(daemon)["accessToken"]
    for headers in served:
        code, body = proxy.request("POST", "/data", headers, b"x=1")
        assert code == 200 and json.loads(body) == {"path": "/api/data", "token": token, "bytes": 3}, (headers, body)
    assert len(recording.seen) == len(served)


def make_certificates(directory):
    """A test CA, and a certificate it signs for localhost: the CA file, the certificate and its key."""
    ca, ca_key = os.path.join(directory, "ca.pem"), os.path.join(directory, "ca.key")
    cert, key, request = (os.path.join(directory, name) for name in ("server.pem", "server.key", "server.csr"))
    extensions = os.path.join(directory, "server.ext")
    with open(extensions, "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for command in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=tokend test CA"],
                    ["req", *ec, "-keyout", key, "-out", request, "-subj", "/CN=localhost"],
                    ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                     "-days", "2", "-extfile", extensions]):
        subprocess.run(["openssl", *command], check=True, capture_output=True)
    return ca, cert, key


def trusting_ca(ca):
    """A prefix that runs the proxy trusting `ca`: it trusts the system's CA bundle, and in a mount
    namespace of its own that bundle is the test CA."""
    return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/ssl/certs/ca-certificates.crt && exec "$@"', ca]


def test_an_https_upstream_is_spoken_to_over_tls_and_one_it_cannot_trust_gets_502(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    ca, cert, key = make_certificates(workdir)
    api = RecordingAPI(tls=(cert, key))
    trusting_dir, plain_dir = os.path.join(workdir, "a"), os.path.join(workdir, "b")
    os.mkdir(trusting_dir)
    os.mkdir(plain_dir)
    trust = trusting_ca(ca)
    misnamed_dir = os.path.join(workdir, "c")
    os.mkdir(misnamed_dir)
    trusting = ProxyProcess(daemon, api.url + "/api", trusting_dir, "--buffer-limit", "1000", prefix=trust)
    plain = ProxyProcess(daemon, api.url + "/api", plain_dir)
    # The same trusted certificate, for localhost, reached by address: its name does not cover it.
    misnamed = ProxyProcess(daemon, api.url.replace("localhost", "127.0.0.1") + "/api", misnamed_dir, prefix=trust)
    try:
        assert api.url.startswith("https://localhost:"), "the name is looked up, and checked against the certificate"
        token = token_of(daemon)["accessToken"]
        for _ in range(2):  # the second on the kept connection
            run = trusting.curl("/data")
            assert json.loads(run.stdout.rsplit("\n", 1)[0]) == {"path": "/api/data", "token": token, "bytes": 0}, run.stdout
        big = os.urandom(300_000)  # over --buffer-limit: streamed through TLS, many records each way
        run = subprocess.run(["curl", "-sS", "--unix-socket", trusting.path, "--data-binary", "@-", "-H", "Expect:",
                              "http://localhost/upload"], input=big, capture_output=True, timeout=60)
        assert json.loads(run.stdout) == {"path": "/api/upload", "token": token, "bytes": len(big)}, run.stdout
        run = trusting.curl("/chunked")
        assert run.stdout.rsplit("\n", 1) == [b"".join(CHUNKED_ANSWER).decode(), "200"], run.stdout
        seen = len(api.seen)
        run = plain.curl("/data")
        assert run.stdout.endswith("502") and "TLS with the upstream failed" in run.stdout, run.stdout
        assert "certificate" in run.stdout.lower(), run.stdout
        run = misnamed.curl("/data")
        assert run.stdout.endswith("502") and "TLS with the upstream failed" in run.stdout, run.stdout
        assert "hostname" in run.stdout.lower(), run.stdout
        assert len(api.seen) == seen, "no request reached an upstream the proxy could not trust"
    finally:
        trusting.stop()
        plain.stop()
        misnamed.stop()
        api.stop()


@pytest.mark.long("a soak: 4,000 TLS connections one after another, a minute or more on 2 cores")
def test_tls_connections_the_upstream_closes_leave_no_memory_behind(server, make_tokend, workdir):
    """4,000 TLS connections, each closed by the upstream after one answer: the proxy's memory stays flat
    (each one's TLS state is let go of when its socket closes)."""
    daemon = make_tokend(server).start()
    login(daemon, server)
    ca, cert, key = make_certificates(workdir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    connections = []

    def serve():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                tls = context.wrap_socket(raw, server_side=True)
                head = b""
                while b"\r\n\r\n" not in head:
                    piece = tls.recv(65536)
                    if not piece:
                        break
                    head += piece
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                connections.append(1)
                tls.close()
            except (OSError, ssl.SSLError):
                raw.close()

    threading.Thread(target=serve, daemon=True).start()
    trust = trusting_ca(ca)
    proxy = ProxyProcess(daemon, f"https://localhost:{listener.getsockname()[1]}", workdir, prefix=trust)
    try:
        # The proxy is the child of the unshare wrapper's exec: the same process.
        def rss_kib():
            with open(f"/proc/{proxy.process.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

        def requests(count):
            script = "".join(f'url = "http://localhost/r{i}"\noutput = /dev/null\n' for i in range(count))
            subprocess.run(["curl", "-sS", "--fail", "--unix-socket", proxy.path, "-K", "-"], input=script, text=True,
                           check=True, timeout=300)

        requests(200)  # warmed up: the loops' buffers, the TLS context, tokend's answers
        before = rss_kib()
        requests(4000)
        grown = rss_kib() - before
        assert len(connections) == 4200, "each request took a TLS connection of its own"
        # Kept, each would hold ~37 KiB (NIOSSL's buffers and session): ~145 MiB for these 4,000.
        assert grown < 8 * 1024, f"RSS grew {grown} KiB over 4,000 TLS connections"
    finally:
        proxy.stop()
        listener.close()


def test_on_a_unix_socket_a_web_page_is_refused_too(server, make_tokend, recording, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    proxy = ProxyProcess(daemon, recording.url, workdir)
    try:
        for header in ("Origin: https://evil.example", "Sec-Fetch-Site: cross-site"):
            run = proxy.curl("/data", "-H", header)
            assert run.stdout.endswith("403") and "only the proxy's own origin" in run.stdout, run.stdout
        assert recording.seen == []
        assert proxy.status("/data") == 200, "a program (no Origin) is served"
    finally:
        proxy.stop()


def test_a_path_that_leaves_the_upstream_prefix_is_refused(recording, tcp_proxy):
    daemon, proxy = tcp_proxy
    host = {"Host": f"127.0.0.1:{proxy.port}"}
    for target in ["/../secret", "/%2e%2e/secret", "/%2E%2e/secret", "/.%2e/secret", "/a/../../secret",
                   "/a/%2e%2e/%2E%2E/secret", "/..%2fsecret", "/..%5Csecret", "/a\\..\\..\\secret", "/%zz/data",
                   "/../secret?x=/../",
                   # Path parameters (Tomcat, Jetty and Spring take `..;` for `..`), double encoding, NUL.
                   "/..;/secret", "/a/..;/..;/secret", "/..%3b/secret", "/%252e%252e/secret", "/..%252fsecret",
                   "/..%255csecret", "/..%00/secret"]:
        code, body = proxy.request("GET", target, host)
        assert code == 400 and "path" in body, (target, code, body)
    assert recording.seen == [], "nothing reached the upstream"
    for target, forwarded in [("/a/./b/../data", "/api/a/data"), ("/a/%2e%2e/data?q=/../x", "/api/data?q=/../x"),
                              ("/a//../b", "/api/a/b"), ("/a/.", "/api/a/"), ("/a/..", "/api/"),
                              ("/group%2Fproject/files", "/api/group%2Fproject/files")]:
        code, body = proxy.request("GET", target, host)
        assert code == 200 and json.loads(body)["path"] == forwarded, (target, body)
    assert [path for _, path, _ in recording.seen] == [
        "/api/a/data", "/api/data?q=/../x", "/api/a/b", "/api/a/", "/api/", "/api/group%2Fproject/files"]


def test_pipelined_requests_are_answered_in_order_on_one_connection(recording, tcp_proxy):
    daemon, proxy = tcp_proxy
    host = f"127.0.0.1:{proxy.port}"
    requests = b"".join(f"GET /p{n} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() for n in range(5))
    requests += f"POST /p5 HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc".encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.sendall(requests)  # six requests in one write: the proxy takes them one after another
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    bodies = [json.loads(b) for b in re.findall(rb"\{[^{}]*\}", data)]
    assert data.count(b"HTTP/1.1 200") == 6, data[:500]
    assert [b["path"] for b in bodies] == [f"/api/p{n}" for n in range(6)], bodies
    assert bodies[-1]["bytes"] == 3 and [path for _, path, _ in recording.seen] == [f"/api/p{n}" for n in range(6)]


def test_framing_is_read_one_way_and_written_for_each_client(recording, tcp_proxy):
    """What request smuggling needs (two framings, two lengths, a folded or unknown coding) is refused
    before anything goes upstream; a chunked upload, Expect: 100-continue and an answer of unknown length
    reach each side in a framing it reads."""
    daemon, proxy = tcp_proxy
    host = f"127.0.0.1:{proxy.port}"

    def exchange(data):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out

    for smuggling in [
        f"POST /a HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        f"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n",
        f"POST /a HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n"
        f"abcdGET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n",
        f"POST /a HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: identity\r\n , chunked\r\n\r\n0\r\n\r\n",
        f"POST /a HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
        f"POST /a HTTP/1.1\r\nHost: {host}\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ]:
        answer = exchange(smuggling.encode())
        assert re.match(rb"HTTP/1.1 (400|501) ", answer) and answer.count(b"HTTP/1.1 ") == 1, (smuggling, answer[:300])
    assert recording.seen == [], "nothing reached the upstream"

    answer = exchange(f"POST /up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                      f"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200") and json.loads(answer.split(b"\r\n\r\n", 1)[1])["bytes"] == 11, answer

    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.sendall(f"PUT /put HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\nContent-Length: 3\r\n"
                  f"Connection: close\r\n\r\n".encode())
        assert s.recv(1000) == b"HTTP/1.1 100 Continue\r\n\r\n", "the proxy asks for the body"
        s.sendall(b"abc")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200") and json.loads(out.split(b"\r\n\r\n", 1)[1])["bytes"] == 3, out

    whole = b"".join(CHUNKED_ANSWER)
    two = exchange(f"GET /chunked HTTP/1.1\r\nHost: {host}\r\n\r\n"
                   f"GET /chunked HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    answers = two.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert len(answers) == 2, two
    for one in answers:
        head, body = one.split(b"\r\n\r\n", 1)
        assert b"Transfer-Encoding: chunked" in head and body.endswith(b"0\r\n\r\n"), one
        assert b"".join(re.findall(rb"[0-9a-f]+\r\n(.*?)\r\n", body[:-5], re.S)) == whole, body
    old = exchange(f"GET /chunked HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    head, body = old.split(b"\r\n\r\n", 1)
    assert old.startswith(b"HTTP/1.0 200") and b"Transfer-Encoding" not in head and body == whole, old
    assert [path for _, path, _ in recording.seen] == ["/api/up", "/api/put", "/api/chunked", "/api/chunked", "/api/chunked"]


class RefusingOnceAPI:
    """An upstream that answers its first request 401 with Connection: close and closes at once (as an
    HTTP/1.0 server or a load balancer does), and every later one 200 with the bearer token it got."""

    def __init__(self):
        self.tokens = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(connection,), daemon=True).start()

    def answer(self, connection):
        with connection:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                token = re.search(rb"(?im)^authorization: bearer (\S+)", head).group(1).decode()
                self.tokens.append(token)
                if len(self.tokens) == 1:
                    connection.sendall(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\n"
                                       b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                body = json.dumps({"token": token}).encode()
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def stop(self):
        self.listener.close()


def test_a_401_whose_connection_closes_after_it_is_still_retried(server, make_tokend, workdir):
    api = RefusingOnceAPI()
    daemon = make_tokend(server).start()
    login(daemon, server)
    proxy = ProxyProcess(daemon, api.url, workdir, "--timeout", "30", port=free_port())
    try:
        code, body = proxy.request("GET", "/data", {"Host": f"127.0.0.1:{proxy.port}"})
        assert code == 200, (code, body, proxy.logs())
        assert len(api.tokens) == 2 and api.tokens[0] != api.tokens[1] == json.loads(body)["token"], api.tokens
        assert "retried after a 401" in proxy.logs()
    finally:
        proxy.stop()
        api.stop()


def test_thousands_of_pipelined_refusals_are_answered_in_order_at_the_client_s_pace(recording, tcp_proxy):
    """Requests refused in a row are taken one after another, not one call deeper each, and the proxy
    reads no more of them while the client does not take its answers."""
    daemon, proxy = tcp_proxy
    count = 100000
    padding = "x" * 200
    requests = b"".join(f"GET /../r{n} HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\nX-Pad: {padding}\r\n\r\n".encode()
                        for n in range(count))
    requests += f"GET /last HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\nConnection: close\r\n\r\n".encode()
    before = vm_rss_kib(proxy.process.pid)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(60)
        s.connect(("127.0.0.1", proxy.port))
        sent = [0]

        def send():
            view = memoryview(requests)
            while sent[0] < len(requests):
                sent[0] += s.send(view[sent[0]:sent[0] + 65536])

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        time.sleep(8)  # the client reads nothing meanwhile: the proxy stops reading once its answers pile up
        grown = (vm_rss_kib(proxy.process.pid) - before) / 1024
        taken = sent[0]
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        sender.join(10)
    assert data.count(b"HTTP/1.1 400 ") == count and data.count(b"HTTP/1.1 200 ") == 1, data[-300:]
    assert data.rstrip().endswith(b'"bytes": 0}'), data[-300:]
    assert proxy.process.poll() is None
    # Answered without a pause, the 100,000 answers (15 MiB, more than the kernel's buffers take) would be
    # held by the proxy while the client reads nothing.
    print(f"{count} refused requests pipelined ({len(requests) >> 20} MiB): {taken >> 10} KiB taken and RSS grew "
          f"{grown:.1f} MiB while the client read nothing")
    assert taken < len(requests) / 2 and grown < 8, (taken, grown)
    assert [path for _, path, _ in recording.seen] == ["/api/last"]


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def test_stalled_bodies_are_bounded_and_timed_out(recording, tcp_proxy):
    daemon, proxy = tcp_proxy
    assert proxy.request("GET", "/data", {"Host": f"127.0.0.1:{proxy.port}"})[0] == 200  # warmed up
    before = vm_rss_kib(proxy.process.pid)
    # cap: --max-connections-per-user's default, half of --max-connections' 256 (every connection here is this user's)
    count, cap, almost = 400, 128, b"x" * ((1 << 20) - 1)
    head = (f"POST /upload HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\nContent-Length: {1 << 20}\r\n\r\n").encode()
    connections = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", proxy.port))
        try:
            s.sendall(head + almost)  # a 1 MiB body (one the proxy would keep) stalls one byte short of its end
        except OSError:
            pass  # over the cap: answered 503 and closed while the body was on its way
        connections.append(s)
    stalled = time.monotonic()
    answers = []
    for s in connections:  # each answered within the 3 s timeout (and 10 s for a slow box) of the last send
        s.settimeout(max(0.1, stalled + 3 + 10 - time.monotonic()))
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            pass
        answers.append(data)
        s.close()
    late = time.monotonic() - stalled
    grown = (vm_hwm_kib(proxy.process.pid) - before) / 1024
    print(f"{count} stalled 1 MiB bodies: peak RSS {grown:+.1f} MiB; answered within {late:.1f} s of the last send")
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408") and b"stalled" in a]
    # The first `cap` connections are served (one fewer if the warm-up's is not yet counted out); the rest
    # get 503 (this user's share is taken), or a reset that cut it off while their body was still arriving.
    assert cap - 2 <= len(timed_out) <= cap, len(timed_out)
    assert all(a.startswith(b"HTTP/1.1 503") or a == b"" for a in answers if a not in timed_out), \
        {a[:40] for a in answers if a not in timed_out}
    assert late < 3 + 10
    # 400 MiB of bodies sent: at most --max-connections of them are served at once, the proxy keeps at most
    # --body-budget (16 MiB) of their bodies, and the rest stream, each connection holding a few 64 KiB reads
    # and its upstream request, a cost that does not grow with the body. Measured: +69 to +99 MiB in all (the
    # 144 refused connections' reads included); the bound, 131 MiB, leaves a loaded machine about 30 % of margin
    # and no longer grows with the number of connections (it was 16 + count * 0.32 = 144 MiB for 400 before the cap).
    assert grown < 16 + cap * 0.45, f"peak RSS grew {grown:.1f} MiB"
    wait_for(lambda: proxy.request("GET", "/data", {"Host": f"127.0.0.1:{proxy.port}"})[0] == 200, 10, "it goes on")


def test_a_stalled_head_gets_408_and_a_connection_over_the_cap_503(server, make_tokend, recording, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    cap, seconds = 20, 2
    proxy = ProxyProcess(daemon, recording.url, workdir, "--header-timeout", str(seconds), "--max-connections",
                         str(cap), "--max-connections-per-user", str(cap), "--timeout", "300", port=free_port())
    try:
        # The proxy holds all `cap` connections when one more comes, as events show, not a time: each held
        # one's request has reached the upstream, which keeps its answer until the gate opens (so no head
        # timeout runs meanwhile, however slow the machine), and no connection was closed before (one the
        # test closed counts until the proxy has read its end).
        head = f"GET /held HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n\r\n".encode()
        partial = f"GET /data HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\nX-Pad: ".encode() + b"a" * 60_000
        held = []
        for index in range(cap):
            s = socket.create_connection(("127.0.0.1", proxy.port))
            # After its answer, one connection sends nothing (an idle keep-alive one); the others have sent
            # a 60 KB head, unfinished, behind their request.
            s.sendall(head + (partial if index else b""))
            held.append(s)
        wait_for(lambda: len(recording.seen) == cap, 60, "every held connection's request upstream")
        with socket.create_connection(("127.0.0.1", proxy.port)) as extra:
            extra.settimeout(10)
            assert extra.recv(200).startswith(b"HTTP/1.1 503"), "a connection over the cap"
        recording.gate.set()
        started = time.monotonic()
        answers = []
        for s in held:
            s.settimeout(max(0.1, started + seconds + 10 - time.monotonic()))
            data = b""
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except OSError:
                pass
            answers.append(data)
            s.close()
        late = time.monotonic() - started
        print(f"{cap} connections with no or a partial head after an answer: 408 within {late:.1f} s "
              f"({seconds} s timeout); one more: 503")
        after = [a[a.find(b"HTTP/1.1 408"):] for a in answers if a.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" in a]
        assert len(after) == cap and all(b"no whole request head" in a for a in after), {a[:60] for a in answers}
        assert late < seconds + 10, late
        # A connection that sends nothing at all gets its 408 too, its time counted from its start (the
        # slots are free now: the proxy closed each held connection, and at most one per loop may still
        # be counted between its close and its release).
        with socket.create_connection(("127.0.0.1", proxy.port)) as silent:
            silent.settimeout(seconds + 10)
            data = b""
            while chunk := silent.recv(65536):
                data += chunk
            assert data.startswith(b"HTTP/1.1 408") and b"no whole request head" in data, data[:60]
        token = token_of(daemon)["accessToken"]
        assert recording.seen == [("GET", "/held", token)] * cap, "no partial head went upstream"
        wait_for(lambda: proxy.request("GET", "/data", {"Host": f"127.0.0.1:{proxy.port}"})[0] == 200, 10,
                 "a request once the slots are free")
    finally:
        proxy.stop()


def activated_proxy(daemon, upstream, address, log):
    """tokend-proxy started by systemd-socket-activate on `address` (host, port): it execs on the first connection."""
    process = subprocess.Popen(
        ["systemd-socket-activate", "-l", f"{address[0]}:{address[1]}", os.path.join(BIN, "tokend-proxy"),
         "--socket", daemon.socket, "--upstream", upstream], stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    wait_for(lambda: "Listening on" in open(log).read() or process.poll() is not None, 20, "systemd-socket-activate")
    return process


def test_a_socket_systemd_passes_must_be_on_loopback(server, make_tokend, recording, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    port, log = free_port(), os.path.join(workdir, "activated.log")
    process = activated_proxy(daemon, recording.url, ("0.0.0.0", port), log)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"GET /data HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
            try:
                answer = s.recv(200)
            except OSError:
                answer = b""
        assert process.wait(30) == 64, open(log).read()
    finally:
        process.kill()
        process.wait()
    text = open(log).read()
    assert f"bound to 0.0.0.0:{port}, which other hosts can reach" in text and "ListenStream=127.0.0.1" in text, text
    assert answer == b"" and recording.seen == [], "nothing served, nothing upstream"
    port, log = free_port(), os.path.join(workdir, "loopback.log")
    process = activated_proxy(daemon, recording.url, ("127.0.0.1", port), log)
    try:
        code, body = request(port, "GET", "/data", {"Host": f"localhost:{port}"})
        assert code == 200 and json.loads(body)["token"] == token_of(daemon)["accessToken"], body
        assert "any local user can use this proxy" in open(log).read()
    finally:
        process.terminate()
        process.wait(10)


def test_every_option_is_in_the_manual():
    usage = subprocess.run([os.path.join(BIN, "tokend-proxy"), "--help"], capture_output=True, text=True).stdout
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", usage))
    assert {"--body-budget", "--body-timeout", "--buffer-limit", "--listen"} <= options, usage
    page = subprocess.run(["groff", "-mandoc", "-Tutf8", "-rLL=200n", "-rHY=0",
                           os.path.join(ROOT, "man", "tokend-proxy.1")],
                          capture_output=True, text=True).stdout
    page = re.sub(r".\x08", "", page)
    assert [o for o in sorted(options) if o != "--help" and o not in page] == []
