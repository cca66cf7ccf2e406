# Over 90 s of `make test` (docs/testing.md): upstreams that never accept, stop reading or stay idle are
# waited out to the proxy's own timeouts (request, stop, keep-alive), which are the situation (140 s summed on
# the busy 2-core machine).
"""tokend-proxy against upstreams that misbehave, each written for its test: one that stops reading a
request body, one that never accepts a connection, one that closes a kept connection when a request
comes, one that answers 204 with a length, one that sets cookies; and the proxy's stop on SIGTERM."""
import os
import re
import signal
import socket
import subprocess
import threading
import time

from conftest import BIN, free_port, login, varlink_call, wait_for
from test_proxy import ProxyProcess, RecordingAPI

B = "io.tokend.Broker."


class RawUpstream:
    """A listener on 127.0.0.1 whose every connection goes to `serve(connection, number)` on a thread
    of its own; `connections` counts those accepted."""

    def __init__(self, serve, backlog=64, accept=True):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(backlog)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.serve = serve
        if accept:
            threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.serve, args=(connection, self.connections), daemon=True).start()

    def stop(self):
        self.listener.close()


def read_head(connection, data=b""):
    """A request head from `connection` (and what came after it), or None at the end of the stream."""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def read_answer(connection):
    """One answer from `connection`: the status, the head's lines (lowercased names) and the body."""
    head, rest = read_head(connection)
    assert head is not None, "the connection ended before an answer"
    lines = head.split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        fields.setdefault(name.strip().lower(), []).append(value.strip())
    length = int(fields.get("content-length", ["0"])[0])
    while len(rest) < length:
        chunk = connection.recv(65536)
        assert chunk, "the connection ended in the answer's body"
        rest += chunk
    return int(lines[0].split(" ")[1]), fields, rest[:length]


def until_closed(connection, timeout=30):
    """Reads what is left until the peer closes; the bytes, or None if it did not close in time."""
    connection.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (TimeoutError, socket.timeout):
        return None
    except ConnectionResetError:
        return data


def logged_in(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    return daemon


def test_an_upstream_that_stops_reading_a_body_gets_504_and_both_connections_close(server, make_tokend, workdir):
    taken = []  # the upstream's connections, held open and never read after the head

    def serve(connection, _):
        head, _ = read_head(connection)
        taken.append((connection, head))

    upstream = RawUpstream(serve)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--timeout", "2", "--buffer-limit", "0", port=free_port())
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=60)
        size = 16 << 20
        client.sendall(f"POST /upload HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\nContent-Length: {size}\r\n\r\n".encode())
        sent = [0]

        def send_body():  # until the proxy stops taking it (the upstream's buffers and the proxy's are full)
            piece = b"x" * 65536
            try:
                while sent[0] < size:
                    sent[0] += client.send(piece)
            except OSError:
                pass
        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        wait_for(lambda: taken, 20, "the upstream to get the request's head")
        status, fields, body = read_answer(client)
        assert status == 504 and b"took none of the request" in body, (status, body)
        assert until_closed(client) is not None, "the client's connection is closed after the 504"
        upstream_side, head = taken[0]
        assert head.startswith("POST /upload HTTP/1.1")
        assert until_closed(upstream_side) is not None, "the upstream's connection is closed too"
        assert sent[0] < size, "the body was not all sent: the upstream stopped it"
        assert "upstream stopped taking the request" in proxy.logs()
    finally:
        proxy.stop()
        upstream.stop()


def test_an_upstream_that_never_accepts_gets_504_after_the_timeout(server, make_tokend, workdir):
    # A backlog of 0 that is full: the kernel answers no more connects (the SYNs are dropped).
    upstream = RawUpstream(lambda *_: None, backlog=0, accept=False)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", upstream.port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--timeout", "2", port=free_port())
    try:
        probe = socket.socket()
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", upstream.port))
            raise AssertionError("the black hole accepted a connection")
        except (TimeoutError, socket.timeout):
            pass  # the situation the test names: connects get no answer
        finally:
            probe.close()
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=60)
        client.sendall(f"GET /data HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n\r\n".encode())
        status, _, body = read_answer(client)
        assert status == 504 and b"did not accept a connection within 2 s" in body, (status, body)
        assert "connectTimedOut" in proxy.logs()
    finally:
        proxy.stop()
        upstream.stop()
        for filler in fillers:
            filler.close()


class ClosingOnSecondRequest:
    """Answers the first request on each connection (keep-alive), reads the second one whole and
    closes without a word, as an upstream does whose idle timeout ends the connection as a request
    arrives. Notes every request by method and path."""

    def __init__(self):
        self.seen = []
        self.upstream = RawUpstream(self.serve)
        self.url = self.upstream.url

    def serve(self, connection, _):
        with connection:
            data = b""
            for number in (1, 2):
                head, data = read_head(connection, data)
                if head is None:
                    return
                request_line = head.split("\r\n")[0]
                length = re.search(r"(?im)^content-length:\s*(\d+)", head)
                length = int(length.group(1)) if length else 0
                while len(data) < length:
                    data += connection.recv(65536)
                data = data[length:]
                self.seen.append(" ".join(request_line.split(" ")[:2]))
                if number == 2:
                    return  # closed without an answer
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def stop(self):
        self.upstream.stop()


def test_only_idempotent_requests_are_sent_again_after_a_kept_connection_dies(server, make_tokend, workdir):
    upstream = ClosingOnSecondRequest()
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--timeout", "10", port=free_port())
    host = f"Host: 127.0.0.1:{proxy.port}\r\n"
    try:
        # One client connection: its requests are served on one loop, whose pool keeps the upstream's connection.
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        client.sendall(f"GET /first HTTP/1.1\r\n{host}\r\n".encode())
        assert read_answer(client)[0] == 200
        client.sendall(f"POST /order HTTP/1.1\r\n{host}Content-Length: 5\r\n\r\nitems".encode())
        status, _, body = read_answer(client)
        assert status == 502, (status, body)
        assert upstream.seen == ["GET /first", "POST /order"], "the POST reached the upstream once, and was not sent again"
        # A GET in the same place is sent again on a new connection, and answered.
        client.sendall(f"GET /again HTTP/1.1\r\n{host}\r\n".encode())
        assert read_answer(client)[0] == 200
        client.sendall(f"GET /twice HTTP/1.1\r\n{host}\r\n".encode())
        status, _, body = read_answer(client)
        assert status == 200 and body == b"ok", (status, body)
        assert upstream.seen[2:] == ["GET /again", "GET /twice", "GET /twice"], upstream.seen
        assert upstream.upstream.connections == 3
    finally:
        proxy.stop()
        upstream.stop()


def test_a_204_with_a_length_reaches_the_client_without_it(server, make_tokend, workdir):
    def serve(connection, _):
        with connection:
            data = b""
            while True:
                head, data = read_head(connection, data)
                if head is None:
                    return
                connection.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Kept: yes\r\n\r\n")

    upstream = RawUpstream(serve)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, port=free_port())
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        for _ in range(2):  # the second answer shows the framing held
            client.sendall(f"DELETE /item HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n\r\n".encode())
            status, fields, body = read_answer(client)
            assert status == 204 and "content-length" not in fields and fields.get("x-kept") == ["yes"], fields
            assert body == b""
    finally:
        proxy.stop()
        upstream.stop()


class CookieSetter:
    """Answers every request 200 with a Set-Cookie named for its path."""

    def __init__(self):
        self.upstream = RawUpstream(self.serve)
        self.url = self.upstream.url

    def serve(self, connection, _):
        with connection:
            data = b""
            while True:
                head, data = read_head(connection, data)
                if head is None:
                    return
                name = head.split(" ")[1].strip("/")
                connection.sendall(f"HTTP/1.1 200 OK\r\nSet-Cookie: {name}=1; Path=/\r\nContent-Length: 2\r\n\r\nok".encode())

    def stop(self):
        self.upstream.stop()


def jar(daemon, url):
    header = varlink_call(daemon.socket, B + "GetCookies", {"url": url + "/"})[1]["parameters"]["header"]
    return header.split("; ") if header else []


def get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        return read_answer(client)


def test_set_cookie_goes_to_tokend_s_jar_and_not_to_the_client_unless_passed(server, make_tokend, workdir):
    upstream = CookieSetter()
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, port=free_port())
    try:
        status, fields, _ = get(proxy.port, "/kept")
        assert status == 200 and "set-cookie" not in fields, fields
        assert "kept=1" in jar(daemon, upstream.url)
    finally:
        proxy.stop()
    os.makedirs(os.path.join(workdir, "passing"))
    passing = ProxyProcess(daemon, upstream.url, os.path.join(workdir, "passing"), "--pass-cookies", port=free_port())
    try:
        status, fields, _ = get(passing.port, "/passed")
        assert status == 200 and fields.get("set-cookie") == ["passed=1; Path=/"], fields
        assert "passed=1" not in jar(daemon, upstream.url)
    finally:
        passing.stop()
        upstream.stop()


def test_a_user_who_may_not_write_cookies_gets_them_with_one_warning(server, make_tokend, workdir):
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'})
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:  # uid 5001 may read the session's token, not write its cookies
        f.write('[access]\nread-groups = []\n' + text + '[sessions.default.access]\nread-users = ["5001"]\n')
    daemon.start()
    login(daemon, server)
    upstream = CookieSetter()
    proxy = ProxyProcess(daemon, upstream.url, workdir, port=free_port(),
                         prefix=("setpriv", "--reuid=5001", "--regid=5001", "--clear-groups"))
    try:
        for name in ("one", "two", "three"):
            status, fields, _ = get(proxy.port, f"/{name}")
            assert status == 200 and fields.get("set-cookie") == [f"{name}=1; Path=/"], fields
        assert proxy.logs().count("tokend refuses this user's cookies") == 1, proxy.logs()
        assert not [c for c in jar(daemon, upstream.url) if c.split("=")[0] in ("one", "two", "three")]
    finally:
        proxy.stop()
        upstream.stop()


def test_sigterm_lets_the_answer_under_way_finish_removes_the_socket_and_exits_0(server, make_tokend, workdir):
    release = threading.Event()

    def serve(connection, _):
        with connection:
            head, _ = read_head(connection)
            if head and " /slow " in head:
                release.wait(30)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")

    upstream = RawUpstream(serve)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--stop-timeout", "30")
    try:
        idle = socket.socket(socket.AF_UNIX)
        idle.connect(proxy.path)
        busy = socket.socket(socket.AF_UNIX)
        busy.settimeout(30)
        busy.connect(proxy.path)
        busy.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        wait_for(lambda: upstream.connections == 1, 20, "the slow request to reach the upstream")
        proxy.process.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in proxy.logs(), 20, "the proxy to take the signal")
        assert until_closed(idle) == b"", "a connection between requests is closed at once"
        wait_for(lambda: not os.path.exists(proxy.path), 20, "the socket file to go")
        assert proxy.process.poll() is None, "the answer under way is waited for"
        release.set()
        status, fields, body = read_answer(busy)
        assert status == 200 and body == b"done" and fields.get("connection") == ["close"], (status, fields)
        assert proxy.process.wait(30) == 0, proxy.logs()
    finally:
        release.set()
        proxy.process.kill()
        proxy.process.wait()
        upstream.stop()


def test_an_exchange_that_outlasts_the_stop_timeout_is_cut_and_the_exit_is_still_0(server, make_tokend, workdir):
    upstream = RawUpstream(lambda connection, _: (read_head(connection), time.sleep(60)))
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--stop-timeout", "1")
    try:
        busy = socket.socket(socket.AF_UNIX)
        busy.connect(proxy.path)
        busy.sendall(b"GET /never HTTP/1.1\r\nHost: localhost\r\n\r\n")
        wait_for(lambda: upstream.connections == 1, 20, "the request to reach the upstream")
        proxy.process.send_signal(signal.SIGINT)
        assert proxy.process.wait(30) == 0, proxy.logs()
        assert "stopped with exchanges under way" in proxy.logs()
        assert not os.path.exists(proxy.path)
    finally:
        proxy.process.kill()
        proxy.process.wait()
        upstream.stop()


def test_a_socket_systemd_passed_is_left_in_place_at_the_stop(server, make_tokend, workdir):
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    path, log = os.path.join(workdir, "activated.sock"), os.path.join(workdir, "activated.log")
    process = subprocess.Popen(
        ["systemd-socket-activate", "-l", path, os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket,
         "--upstream", recording.url], stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_for(lambda: "Listening on" in open(log).read() or process.poll() is not None, 20, "systemd-socket-activate")
        with socket.socket(socket.AF_UNIX) as client:  # the first connection execs the proxy
            client.settimeout(30)
            client.connect(path)
            client.sendall(b"GET /data HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert read_answer(client)[0] == 200
        wait_for(lambda: "listening" in open(log).read(), 20, "the proxy")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, open(log).read()
        assert os.path.exists(path), "the socket systemd passed is systemd's to remove"
    finally:
        process.kill()
        process.wait()
        recording.stop()


def test_a_socket_it_cannot_bind_exits_1_with_the_reason(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    result = subprocess.run(
        [os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket, "--upstream", "http://127.0.0.1:9",
         "--listen", f"unix:{workdir}/no/such/directory/api.sock"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "bind" in result.stderr and "No such file or directory" in result.stderr, result.stderr
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    result = subprocess.run(
        [os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket, "--upstream", "http://127.0.0.1:9",
         "--listen", f"tcp:127.0.0.1:{taken.getsockname()[1]}"], capture_output=True, text=True, timeout=30)
    taken.close()
    assert result.returncode == 1 and "Address already in use" in result.stderr, result.stderr


def test_idle_upstream_connections_close_after_the_keepalive_timeout(server, make_tokend, workdir):
    closed = []

    def serve(connection, number):
        with connection:
            data = b""
            while True:
                head, data = read_head(connection, data)
                if head is None:
                    closed.append(number)
                    return
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    upstream = RawUpstream(serve)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--keepalive-timeout", "1", port=free_port())
    try:
        assert get(proxy.port, "/one")[0] == 200
        wait_for(lambda: closed == [1], 20, "the proxy to close its idle connection")
        assert get(proxy.port, "/two")[0] == 200, "a new connection serves the next request"
        assert upstream.connections == 2
    finally:
        proxy.stop()
        upstream.stop()


def test_no_more_idle_upstream_connections_are_kept_than_keepalive_says(server, make_tokend, workdir):
    open_connections = set()
    lock = threading.Lock()
    together = threading.Barrier(6)  # no request is answered before all six came: six connections at once

    def serve(connection, number):
        with connection:
            with lock:
                open_connections.add(number)
            data = b""
            while True:
                head, data = read_head(connection, data)
                if head is None:
                    break
                try:
                    together.wait(30)
                except threading.BrokenBarrierError:
                    pass
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            with lock:
                open_connections.discard(number)

    upstream = RawUpstream(serve)
    daemon = logged_in(server, make_tokend)
    proxy = ProxyProcess(daemon, upstream.url, workdir, "--keepalive", "2", port=free_port())
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(get(proxy.port, "/x")[0])) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert results == [200] * 6
        assert upstream.connections == 6, "six requests at once, six connections"
        wait_for(lambda: len(open_connections) == 2, 20, "the proxy to keep two and close the rest")
    finally:
        proxy.stop()
        upstream.stop()


def test_logs_name_the_kind_of_an_upstream_failure(server, make_tokend, workdir):
    daemon = logged_in(server, make_tokend)
    closed_port = free_port()  # nothing listens: refused
    proxy = ProxyProcess(daemon, f"http://127.0.0.1:{closed_port}", workdir, port=free_port())
    try:
        status, _, body = get(proxy.port, "/data")
        assert status == 502 and b"refused the connection" in body, body
        assert re.search(r"kind=refused", proxy.logs()), proxy.logs()
    finally:
        proxy.stop()


HOLD = r"""
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held, refused = [], 0
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(0.5)
    try:
        if s.recv(200).startswith(b"HTTP/1.1 503"):
            refused += 1
    except OSError:
        held.append(s)  # admitted: the proxy waits for a request head
print(len(held), refused, flush=True)
time.sleep(60)
"""


def test_on_tcp_another_user_holding_connections_cannot_take_this_user_s_slots(server, make_tokend, workdir):
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    proxy = ProxyProcess(daemon, recording.url, workdir, "--max-connections", "8", "--max-connections-per-user", "4",
                         "--header-timeout", "60", port=free_port())
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", HOLD,
                               str(proxy.port), "8"], stdout=subprocess.PIPE, text=True)
    try:
        held, refused = map(int, holder.stdout.readline().split())
        assert (held, refused) == (4, 4), "uid 65534 holds its four slots, and its other connections get 503"
        assert "refused a connection over its user's cap" in proxy.logs() and "uid=65534" in proxy.logs()
        # This user's requests are served, each on a connection of its own, while the other user holds its four.
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as client:
                client.sendall(f"GET /data HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n\r\n".encode())
                assert read_answer(client)[0] == 200
    finally:
        holder.kill()
        holder.wait()
        proxy.stop()
        recording.stop()
