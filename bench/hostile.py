"""make bench: tokend's memory under hostile peers (issue 27). Two crowds,
one after the other, against a logged-in tokend whose access token is the
size of a real JWT (681 characters):

- `large`: N connections each send one ~900 KB call (answered NoSuchSession)
  and stay connected, idle;
- `never_read`: N connections each send 64 KiB of minimal GetToken calls and
  never read a reply (one user: its 4 MiB budget closes most of them);
- `never_read_many`: the same with each connection from a uid of its own
  (root needed), so that only each connection's limits apply.

For each: tokend's RSS growth while the crowd is connected, and after it has
left (goal: growth <= 48 MiB).

    python3 bench/hostile.py BIN_DIR [--connections N] [--results FILE]

Prints one JSON line and a Markdown table; writes the table, dated, to FILE. The functions are also used by
Tests/integration/test_hostile_peers.py against the debug build.
"""
import argparse
import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

GET_TOKEN = b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0'
READERS_GID = 4301


class JWTSizedEndpoint:
    """A token endpoint whose access tokens have a real JWT's length."""

    def __init__(self, length=681):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.dumps({"access_token": secrets.token_urlsafe(length)[:length], "token_type": "Bearer",
                                   "expires_in": 3600, "refresh_token": secrets.token_urlsafe(24)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def read_frame(s):
    data = b""
    while not data.endswith(b"\0"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return json.loads(data[:-1])


def large_calls(path, connections, size=900_000):
    """Connections that each made one ~900 KB call, had it answered, and stay idle."""
    crowd = []
    call = json.dumps({"method": "io.tokend.Broker.GetToken", "parameters": {"session": "s" * size}}).encode() + b"\0"
    for _ in range(connections):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(call)
        reply = read_frame(s)
        assert "error" in reply, reply
        crowd.append(s)
    return crowd


def never_reading(path, connections, amount=65536):
    """Connections that each sent `amount` bytes of minimal GetToken calls and read nothing."""
    crowd = []
    calls = GET_TOKEN * (amount // len(GET_TOKEN))
    for _ in range(connections):
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(path)
        s.settimeout(5)
        try:
            s.sendall(calls)
        except OSError:
            pass  # closed by tokend: counted after the measurement
        crowd.append(s)
    return crowd


def never_reading_as_many_users(path, connections, gid, first_uid=50000, amount=65536):
    """`never_reading`, each connection made by a process of its own uid (and
    supplementary group `gid`): one person each, so no shared budget applies,
    only each connection's own limits. Needs root."""
    crowd = []
    calls = GET_TOKEN * (amount // len(GET_TOKEN))
    for index in range(connections):
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            parent.close()
            os.setgroups([gid])
            os.setgid(first_uid + index)
            os.setuid(first_uid + index)
            s = socket.socket(socket.AF_UNIX)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(path)
            s.settimeout(5)
            try:
                s.sendall(calls)
            except OSError:
                pass
            socket.send_fds(child, [b"x"], [s.fileno()])
            os._exit(0)
        child.close()
        _, fds, _, _ = socket.recv_fds(parent, 1, 1)
        parent.close()
        os.waitpid(pid, 0)
        crowd.append(socket.socket(fileno=fds[0]))
    return crowd


def open_to_group(daemon, gid):
    """Restarts `daemon` with its socket open to members of `gid` (same state: still logged in)."""
    daemon.stop()
    config = os.path.join(os.path.dirname(daemon.socket), "tokend.toml")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(f'[access]\nread-groups = ["{gid}"]\n' + text.replace("[daemon]\n", '[daemon]\nsocket-mode = "0666"\n', 1))
    os.chmod(os.path.dirname(daemon.socket), 0o755)
    daemon.process = subprocess.Popen([os.path.join(daemon.bin_dir, "tokend"), "--config", config],
                                      stdout=subprocess.DEVNULL, stderr=open(daemon.log_path, "a"),
                                      preexec_fn=bench.raise_nofile)
    deadline = time.monotonic() + 20
    while True:
        try:
            daemon.call("GetStatus")
            return
        except OSError:
            assert time.monotonic() < deadline and daemon.process.poll() is None, "tokend did not restart"
            time.sleep(0.05)


def closed_by_tokend(crowd):
    """How many of the crowd tokend has closed (read only now, after the measurement)."""
    closed = 0
    for s in crowd:
        s.setblocking(False)
        try:
            while s.recv(1 << 20):
                pass
            closed += 1  # end of stream
        except BlockingIOError:
            pass
        except OSError:
            closed += 1  # reset
    return closed


def peak_rss(pid, seconds):
    """The highest RSS seen over `seconds` (tokend answers the crowd meanwhile)."""
    peak, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss_kib(pid))
        time.sleep(0.05)
    return peak


def settled_rss(pid, seconds=3):
    """The lowest RSS seen over `seconds` once the crowd has left: tokend hands
    freed memory back at its next check (1 s)."""
    lowest, end = rss_kib(pid), time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.1)
        lowest = min(lowest, rss_kib(pid))
    return lowest


def measure(pid, path, connections, crowds=None):
    """Crowds against tokend at `path` (process `pid`): RSS figures in KiB."""
    results = {"connections": connections}
    for name, crowd_of in (crowds or (("large", large_calls), ("never_read", never_reading))):
        before = rss_kib(pid)
        crowd = crowd_of(path, connections)
        during = peak_rss(pid, 2)
        closed = closed_by_tokend(crowd)
        for s in crowd:
            s.close()
        after = settled_rss(pid)
        results[name] = {"before_kib": before, "growth_kib": during - before, "after_kib": after,
                         "after_growth_kib": after - before, "closed_by_tokend": closed}
    return results


def render(r):
    rows = [f"| {r['connections']} connections | RSS growth while connected | RSS after they left (vs before) "
            "| closed by tokend |", "|---|---|---|---|"]
    for name, label in (("large", "idle after one 900 KB call each, one user"),
                        ("never_read", "sent 64 KiB of GetToken, never read, one user"),
                        ("never_read_many", "same, each connection a user of its own")):
        m = r[name]
        rows.append(f"| {label} | {m['growth_kib'] / 1024:.1f} MiB | {m['after_kib'] / 1024:.1f} MiB "
                    f"({m['after_growth_kib'] / 1024:+.1f} MiB) | {m['closed_by_tokend']} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--results")
    args = parser.parse_args()
    bench.raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkhostile", dir="/tmp")
    endpoint = JWTSizedEndpoint()
    daemon = bench.Daemon(args.bin_dir, directory, endpoint)
    try:
        token = daemon.call("GetToken")["parameters"]["token"]["accessToken"]
        assert len(token) == 681, len(token)
        results = measure(daemon.process.pid, daemon.socket, args.connections)
        open_to_group(daemon, READERS_GID)
        many = measure(daemon.process.pid, daemon.socket, args.connections, (
            ("never_read_many", lambda path, n: never_reading_as_many_users(path, n, READERS_GID)),))
        results["never_read_many"] = many["never_read_many"]
    finally:
        daemon.stop()
    table = render(results)
    print(json.dumps(results))
    print(table)
    if args.results:
        with open(args.results, "w") as f:
            f.write(f"# Hostile peers (make bench, {time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores, "
                    f"release build)\n\n{table}\n\n```\n{json.dumps(results)}\n```\n")


if __name__ == "__main__":
    main()
