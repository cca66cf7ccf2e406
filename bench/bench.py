"""make bench: tokend against the physical limit of its socket API (a minimal
C epoll server answering NUL-terminated requests with a reply of GetToken's
size) and against oidc-agent, in one run, with one load client.

    python3 bench/bench.py BIN_DIR LOAD LIMIT_SERVER RESULTS_FILE [--rounds N]

Prints one table and writes it, with the date and the machine, to RESULTS_FILE.
"""
import argparse
import http.server
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_bench  # noqa: E402
import oidc_agent  # noqa: E402
import startup  # noqa: E402

GET_TOKEN = '{"method":"io.tokend.Broker.GetToken","parameters":{}}'


class FakeEndpoint:
    """A token endpoint on loopback: every refresh_token grant gets a fresh
    access token (and a rotated refresh token) after a fixed delay. Counts calls
    per path; the path's first segment chooses expires_in and the delay:
    /fast/ (3600 s, no delay) and /slow/ (10 s, 50 ms)."""

    def __init__(self):
        self.calls = {}
        self.answered_at = {}  # path -> wall-clock time its last answer was sent
        self.lock = threading.Lock()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                slow = self.path.startswith("/slow/")
                with endpoint.lock:
                    endpoint.calls[self.path] = endpoint.calls.get(self.path, 0) + 1
                if slow:
                    time.sleep(0.05)
                body = json.dumps({"access_token": secrets.token_urlsafe(24), "token_type": "Bearer",
                                   "expires_in": 10 if slow else 3600,
                                   "refresh_token": secrets.token_urlsafe(24)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                with endpoint.lock:
                    endpoint.answered_at[self.path] = time.time()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, path):
        with self.lock:
            return self.calls.get(path, 0)


def raise_nofile():
    """Room for 10,000 connections on each side (raising the hard limit needs root)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536, max(hard, 65536)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Daemon:
    def __init__(self, bin_dir, directory, endpoint, key=None, env=None, max_connections=30000, default_keys=(),
                 sessions=()):
        self.socket = os.path.join(directory, "sock")
        self.log_path = os.path.join(directory, "tokend.log")
        lines = ["[daemon]", f'socket = "{self.socket}"', f'state-directory = "{directory}/state"',
                 'log-level = "info"', 'log-target = "console"', f"max-connections = {max_connections}",
                 f"max-connections-per-user = {max_connections}", "forced-refreshes-per-minute = 600"]
        if key:
            lines.append(f'state-key-file = "{key}"')
        lines += ["[sessions.default]", f'token-endpoint = "{endpoint.url}/fast/token"', 'client-id = "bench"',
                  'client-auth = "none"', *default_keys,
                  "[sessions.stampede]", f'token-endpoint = "{endpoint.url}/slow/token"', 'client-id = "bench"',
                  'client-auth = "none"', "refresh-margin = 0", "min-valid = 5", *sessions]
        config = os.path.join(directory, "tokend.toml")
        with open(config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.bin_dir = bin_dir
        self.process = subprocess.Popen([os.path.join(bin_dir, "tokend"), "--config", config],
                                        stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"),
                                        preexec_fn=raise_nofile, env=env)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            assert time.time() < deadline and self.process.poll() is None, "tokend did not start"
            time.sleep(0.02)
        names = ["default", "stampede"] + [line[len("[sessions."):-1] for line in sessions
                                           if line.startswith("[sessions.") and "." not in line[len("[sessions."):-1]]
        for session in names:
            subprocess.run([os.path.join(bin_dir, "tokenctl"), "login", "--socket", self.socket, "--session", session],
                           input="bench-refresh-token\n", text=True, check=True, capture_output=True)

    def call(self, method, **parameters):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.socket)
            s.sendall(json.dumps({"method": f"io.tokend.Broker.{method}", "parameters": parameters}).encode() + b"\0")
            data = b""
            while not data.endswith(b"\0"):
                data += s.recv(65536)
        return json.loads(data[:-1])

    def rss_kib(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS")).split()[1])

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(20)


def load(binary, *args):
    result = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=600,
                            preexec_fn=raise_nofile)
    if result.returncode != 0:
        raise RuntimeError(f"load {args[0]} failed: {result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def cpu_split(pid):
    """User and system CPU time the process has used (/proc/PID/stat fields 14 and 15), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def socket_suite(binary, path, request, pid):
    """One round: sequential latency, then throughput at 1, 16 and 64 connections and pipelined.
    Around the 16-connection run, the server's CPU time per call (user + system)."""
    figures = {"latency": load(binary, "latency", path, 20000, request)}
    for connections, depth in ((1, 1), (16, 1), (64, 1), (16, 16)):
        user, system = cpu_split(pid)
        run = load(binary, "throughput", path, connections, depth, 2, request)
        figures[f"rps_{connections}x{depth}"] = run["rps"]
        if (connections, depth) == (16, 1):
            user_after, system_after = cpu_split(pid)
            per_call = 1e6 / run["total_requests"]
            figures["cpu_user_us_per_call_16x1"] = (user_after - user) * per_call
            figures["cpu_sys_us_per_call_16x1"] = (system_after - system) * per_call
            figures["cpu_us_per_call_16x1"] = (user_after - user + system_after - system) * per_call
    return figures


def median_of(rounds, key, field=None):
    values = [r[key][field] if field else r[key] for r in rounds]
    return statistics.median(values)


def stampede(binary, daemon, endpoint, clients):
    """Every client asks at once while the token has less life left than min-valid (5 s of 10)."""
    status = daemon.call("GetStatus", session="stampede")["parameters"]["status"]
    wait = status["expiresAt"] - 4.5 - time.time()
    if wait > 0:
        time.sleep(wait)
    before = endpoint.count("/slow/token")
    request = '{"method":"io.tokend.Broker.GetToken","parameters":{"session":"stampede"}}'
    result = load(binary, "burst", daemon.socket, clients, request)
    result["upstream_calls"] = endpoint.count("/slow/token") - before
    # From the upstream answer until the last waiter had its token, next to one
    # round of cached calls on the same connections.
    result["last_waiter_after_upstream_ms"] = (result["last_reply_wall"] - endpoint.answered_at["/slow/token"]) * 1e3
    return result


SUBSCRIBE = '{"method":"io.tokend.Broker.Subscribe","parameters":{},"more":true}'


def fan_out(binary, path, fire):
    """10,000 subscribers on `path`; `fire()` makes the server send one event; the load client
    times from the first subscriber having it to the last."""
    hold = subprocess.Popen([binary, "hold", path, "10000", SUBSCRIBE, '"refreshed"'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
    assert hold.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    hold.stdin.write("go\n")
    hold.stdin.flush()
    fire()
    result = json.loads(hold.stdout.readline())
    hold.stdin.close()
    hold.wait(60)
    time.sleep(0.5)
    return result


def memory(binary, daemon, idle_kib, limit):
    figures = {"idle_kib": idle_kib, "after_load_kib": daemon.rss_kib()}
    hold = subprocess.Popen([binary, "hold", daemon.socket, "10000", "-", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
    assert hold.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    figures["idle_connections_kib"] = daemon.rss_kib()
    hold.stdin.close()
    hold.wait(60)
    time.sleep(0.5)
    # Three rounds each, interleaved: tokend's refresh event and the C server's event.
    tokend, floor = [], []
    for _ in range(3):
        def refresh():
            time.sleep(0.2)
            figures["subscribers_kib"] = max(figures.get("subscribers_kib", 0), daemon.rss_kib())
            daemon.call("Refresh")
        tokend.append(fan_out(binary, daemon.socket, refresh))
        floor.append(fan_out(binary, limit.socket, lambda: os.kill(limit.pid, signal.SIGUSR1)))
    figures["fanout"] = {"first_to_last_ms": statistics.median(r["first_to_last_ms"] for r in tokend),
                         "all_received_ms": statistics.median(r["all_received_ms"] for r in tokend),
                         "limit_first_to_last_ms": statistics.median(r["first_to_last_ms"] for r in floor)}
    return figures


def refused(binary, bin_dir, directory, endpoint):
    """5,000 connects to a tokend whose 200 connections (and the 16 kept for admins: the
    bench runs as root) are all taken: each is answered TooManyConnections at once; what
    that costs in memory and time."""
    path = os.path.join(directory, "refusing")
    os.mkdir(path)
    daemon = Daemon(bin_dir, path, endpoint, max_connections=200)
    try:
        hold = subprocess.Popen([binary, "hold", daemon.socket, "216", "-", "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
        assert hold.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        before = daemon.rss_kib()
        user, system = cpu_split(daemon.process.pid)
        run = load(binary, "oneshot", daemon.socket, 5000, 10, GET_TOKEN)
        user_after, system_after = cpu_split(daemon.process.pid)
        after = daemon.rss_kib()
        answered = daemon.call("GetToken")  # over the limit too: the answer every refused client read
        hold.stdin.close()
        hold.wait(60)
        return {"connects": 5000, "rss_growth_kib": after - before, "p50_us": run["p50_us"], "p99_us": run["p99_us"],
                "max_us": run["max_us"], "cpu_us_per_connect": (user_after - user + system_after - system) * 1e6 / 5000,
                "answer": answered.get("error")}
    finally:
        daemon.stop()


def rotation_cost(daemon, count=200):
    """Forced refreshes against the no-delay endpoint; tokend logs, for each, the
    time from the server's answer to the state being durable (fsync'd)."""
    with open(daemon.log_path) as f:
        seen = len(f.readlines())
    for _ in range(count):
        daemon.call("Refresh")
    with open(daemon.log_path) as f:
        lines = f.readlines()[seen:]
    values = sorted(int(m.group(1)) for line in lines if (m := re.search(r"durable_us=(\d+)", line)))
    return {"count": len(values), "p50_us": values[len(values) // 2], "p99_us": values[len(values) * 99 // 100]}


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{os.cpu_count()} cores, {cpu}, Linux {platform.release()}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("load")
    parser.add_argument("limit_server")
    parser.add_argument("results")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkbench", dir="/tmp")
    endpoint = FakeEndpoint()
    daemon = Daemon(args.bin_dir, directory, endpoint)
    time.sleep(0.5)
    idle_kib = daemon.rss_kib()  # before any load: allocator caches grow under load and stay
    reply = daemon.call("GetToken")
    reply_bytes = len(json.dumps(reply, separators=(",", ":"))) + 1
    limit_socket = os.path.join(directory, "limit.sock")
    limit = subprocess.Popen([args.limit_server, limit_socket, str(reply_bytes)], stdout=subprocess.PIPE, text=True)
    assert limit.stdout.readline().strip() == "ready"
    limit.socket = limit_socket
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
               "reply_bytes": reply_bytes, "rounds": args.rounds}
    try:
        rounds = {"limit": [], "tokend": []}
        for _ in range(args.rounds):  # interleaved, so drift affects all alike
            rounds["limit"].append(socket_suite(args.load, limit_socket, GET_TOKEN, limit.pid))
            rounds["tokend"].append(socket_suite(args.load, daemon.socket, GET_TOKEN, daemon.process.pid))
        for target, data in rounds.items():
            results[target] = {
                "p50_us": median_of(data, "latency", "p50_us"), "p90_us": median_of(data, "latency", "p90_us"),
                "p99_us": median_of(data, "latency", "p99_us"),
                **{key: median_of(data, key) for key in data[0] if key.startswith(("rps_", "cpu_"))},
            }
        results["stampede"] = {str(n): stampede(args.load, daemon, endpoint, n) for n in (100, 1000, 10000)}
        results["memory"] = memory(args.load, daemon, idle_kib, limit)
        results["refused"] = refused(args.load, args.bin_dir, directory, endpoint)
        results["rotation_plain"] = rotation_cost(daemon)
        daemon.stop()
        key = os.path.join(directory, "state.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, subprocess.run([os.path.join(args.bin_dir, "tokend"), "--generate-state-key"],
                                    capture_output=True, check=True).stdout)
        os.close(fd)
        sealed_dir = os.path.join(directory, "sealed")
        os.mkdir(sealed_dir)
        sealed = Daemon(args.bin_dir, sealed_dir, endpoint, key=key)
        results["rotation_sealed"] = rotation_cost(sealed)
        sealed.stop()
        startup.BIN = args.bin_dir
        runs = [startup.exec_to_ready(directory, run) for run in range(10)]
        first = [startup.activated_first_reply(directory) for _ in range(10)]
        results["startup"] = {"exec_to_ready_ms": statistics.median(runs), "activated_first_reply_ms": statistics.median(first)}
        results["oidc_agent"] = oidc_agent.measure(args.load, directory)
        results["fleet"] = fleet_bench.measure(args.bin_dir, directory, endpoint.url + "/fast/token")
    finally:
        limit.terminate()
        if daemon.process.poll() is None:
            daemon.stop()
    table = render(results)
    print(table)
    with open(args.results, "w") as f:
        f.write(table)
    with open(os.path.splitext(args.results)[0] + ".json", "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    shutil.rmtree(directory, ignore_errors=True)


def render(r):
    limit, tokend = r["limit"], r["tokend"]
    rows = [("cached GetToken p50 (µs, 1 connection, sequential)", "p50_us", True),
            ("cached GetToken p90 (µs)", "p90_us", True), ("cached GetToken p99 (µs)", "p99_us", True),
            ("throughput, 1 connection (req/s)", "rps_1x1", False),
            ("throughput, 16 connections (req/s)", "rps_16x1", False),
            ("throughput, 64 connections (req/s)", "rps_64x1", False),
            ("throughput, 16 connections × 16 pipelined (req/s)", "rps_16x16", False),
            ("server CPU per call at 16 connections (µs, user + system)", "cpu_us_per_call_16x1", True),
            ("  of which user (µs)", "cpu_user_us_per_call_16x1", True),
            ("  of which system (µs)", "cpu_sys_us_per_call_16x1", True)]
    out = [f"# tokend benchmark — {r['date']}", "", f"Machine: {r['machine']}.", "",
           f"Command: `make bench` (release build, {r.get('rounds', 3)} interleaved rounds, medians). "
           f"Limit: C epoll server answering each NUL-terminated request with {r['reply_bytes']} bytes "
           "(a GetToken reply's size); the same C load client drives both.", "",
           "| measure | limit | tokend | tokend / limit |",
           "| --- | ---: | ---: | ---: |"]
    for label, key, lower_is_better in rows:
        ratio = tokend[key] / limit[key]
        out.append(f"| {label} | {limit[key]:,.1f} | {tokend[key]:,.1f} | {ratio:.2f}× |" if lower_is_better else
                   f"| {label} | {limit[key]:,.0f} | {tokend[key]:,.0f} | {ratio:.0%} |")
    out += ["", "Stampede (token inside its min-valid window, upstream answers after a fixed 50 ms):", "",
            "| clients | upstream calls | p50 beyond 50 ms (ms) | p99 beyond 50 ms (ms) | max beyond 50 ms (ms) | errors |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, s in r["stampede"].items():
        out.append(f"| {int(n):,} | {s['upstream_calls']} | {s['p50_us'] / 1000 - 50:.1f} | {s['p99_us'] / 1000 - 50:.1f} "
                   f"| {s['max_us'] / 1000 - 50:.1f} | {s['errors']} |")
    out += ["", "Stampede against the same number of cached calls (same run, same connections, kept open):", "",
            "| clients | upstream answer → last waiter has its token (ms) | one cached call on every connection, "
            "first send → last reply (ms) | ratio |", "| ---: | ---: | ---: | ---: |"]
    for n, s in r["stampede"].items():
        out.append(f"| {int(n):,} | {s['last_waiter_after_upstream_ms']:.1f} | {s['cached_round_ms']:.1f} | "
                   f"{s['last_waiter_after_upstream_ms'] / s['cached_round_ms']:.2f}× |")
    m = r["memory"]
    out += ["", "| memory (RSS) | MiB |", "| --- | ---: |",
            f"| idle after start and login (two sessions) | {m['idle_kib'] / 1024:.1f} |",
            f"| after the throughput and stampede runs | {m['after_load_kib'] / 1024:.1f} |",
            f"| with 10,000 idle connections open | {m['idle_connections_kib'] / 1024:.1f} |",
            f"| with 10,000 subscribers | {m['subscribers_kib'] / 1024:.1f} |", "",
            "Fan-out of one event to 10,000 subscribers, from the first subscriber having it to the last "
            "(median of 3, interleaved):", "",
            "| fan-out | limit (C, one write per subscriber) | tokend (a forced refresh) | tokend / limit |",
            "| --- | ---: | ---: | ---: |",
            f"| first → last subscriber (ms) | {m['fanout']['limit_first_to_last_ms']:.1f} | "
            f"{m['fanout']['first_to_last_ms']:.1f} | "
            f"{m['fanout']['first_to_last_ms'] / max(m['fanout']['limit_first_to_last_ms'], 0.1):.2f}× |", "",
            f"tokend: Refresh sent → all 10,000 have the event: {m['fanout']['all_received_ms']:.0f} ms.", ""]
    if r.get("refused"):
        x = r["refused"]
        out += [f"Refused: {x['connects']:,} connects (10 at a time) while all of max-connections = 200 are held; "
                f"each answered `{x['answer']}` and closed by the loop:", "",
                "| refused connects | value |", "| --- | ---: |",
                f"| RSS growth (MiB) | {x['rss_growth_kib'] / 1024:.1f} |",
                f"| connect → answer, p50 / p99 / max (µs) | {x['p50_us']:,.0f} / {x['p99_us']:,.0f} / "
                f"{x['max_us']:,.0f} |",
                f"| tokend CPU per refused connect (µs) | {x['cpu_us_per_connect']:.1f} |", ""]
    out += [
            "| other | value |", "| --- | ---: |",
            f"| exec → READY=1 (ms, median of 10) | {r['startup']['exec_to_ready_ms']:.1f} |",
            f"| socket-activated first reply (ms, median of 10) | {r['startup']['activated_first_reply_ms']:.1f} |",
            f"| rotation: server answer → state durable, plain (µs p50 / p99) | "
            f"{r['rotation_plain']['p50_us']:,} / {r['rotation_plain']['p99_us']:,} |",
            f"| rotation: server answer → state durable, AES-GCM sealed (µs p50 / p99) | "
            f"{r['rotation_sealed']['p50_us']:,} / {r['rotation_sealed']['p99_us']:,} |"]
    if r.get("fleet"):
        f = r["fleet"]
        out += ["", f"Fleet: 3 hosts sharing one session through PostgreSQL 15 on loopback; host A refreshes "
                f"{f['refreshes']} times, one after another; when B and C have the new token, after A has it "
                "(each host's `refreshed` event):", "",
                "| fleet | p50 (ms) | p99 (ms) | max (ms) |", "| --- | ---: | ---: | ---: |",
                f"| one host's refresh → the new token on the other hosts | {f['p50_ms']:.1f} | {f['p99_ms']:.1f} "
                f"| {f['max_ms']:.1f} |"]
    o = r["oidc_agent"]
    out += ["", "oidc-agent (" + o.get("version", "?") + ") against the same machine, same load client "
            "(one plain-JSON request per connection, its protocol):", ""]
    if o.get("error"):
        out.append(f"Not measured: {o['error']}")
    else:
        out += ["| oidc-agent | value | tokend, same measure |", "| --- | ---: | ---: |",
                f"| cached token p50, 1 client (µs) | {o['clients_1']['p50_us']:,.0f} | {tokend['p50_us']:,.1f} |",
                f"| throughput, 1 client (req/s) | {o['clients_1']['rps']:,} | {tokend['rps_1x1']:,.0f} |",
                f"| throughput, 16 clients (req/s) | {o['clients_16']['rps']:,} | {tokend['rps_16x1']:,.0f} |"]
        if o.get("rotation_ms"):
            out.append(f"| rotation (forced refresh against the real server, ms) | {o['rotation_ms']:,.0f} | |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
