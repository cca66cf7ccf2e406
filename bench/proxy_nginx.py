"""make bench-proxy: tokend-proxy against what a user would pick instead, in one run.

An nginx upstream returns a fixed body; nginx as a reverse proxy in front of it adds a fixed
Authorization header (keep-alive upstream connections); tokend-proxy on tcp:127.0.0.1 puts a
logged-in tokend session's token on the same requests to the same upstream. wrk (keep-alive)
drives the upstream directly and each proxy at 1, 16 and 64 connections, in an even number of
short rounds, every other one in the opposite order, so that drift affects all alike. For each
proxy: requests/s, p50 and p99 (wrk's), CPU per request (user + system from /proc around the run,
all of nginx's processes) and RSS after the run, as medians over the rounds; against nginx, the
median of its ratios to nginx in the same round (tokend-proxy runs next to nginx, an older build
given with --before one place further) and the ratio of the medians. Every round is in the JSON.

    python bench/proxy_nginx.py BIN_DIR RESULTS_MD [--rounds 8] [--seconds 3] [--connections 1,16,64]
                                [--before OLD_TOKEND_PROXY]

With --before, another tokend-proxy binary (an older build) runs in the same rounds, in front of
the same upstream and tokend, as "tokend-proxy (before)".
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

BODY = '{"items":[1,2,3],"ok":true}'  # the upstream's fixed answer
PATH = "/v1/items"
CHECK = "/token-check"  # the upstream answers 200 here only to the session's token, else 401


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    import socket
    deadline = time.time() + 20
    while True:
        assert process.poll() is None, f"{what} exited ({process.returncode})"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            assert time.time() < deadline, f"{what} did not listen on {port}"
            time.sleep(0.05)


@dataclass
class Nginx:
    """One nginx (master + workers) with a configuration of its own in `directory`."""
    directory: str
    port: int
    server: str  # the body of the server block
    http: str = ""  # more of the http block (an upstream)
    workers: str = "auto"
    process: subprocess.Popen = field(init=False)

    def __post_init__(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        config = os.path.join(self.directory, "nginx.conf")
        with open(config, "w") as f:
            f.write(f"""daemon off;
master_process on;
worker_processes {self.workers};
pid {self.directory}/nginx.pid;
error_log {self.directory}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {self.directory}/body;
  proxy_temp_path {self.directory}/proxy;
  fastcgi_temp_path {self.directory}/fastcgi;
  uwsgi_temp_path {self.directory}/uwsgi;
  scgi_temp_path {self.directory}/scgi;
  keepalive_requests 1000000;
  {self.http}
  server {{
    listen 127.0.0.1:{self.port};
    {self.server}
  }}
}}
""")
        self.process = subprocess.Popen(["nginx", "-c", config, "-p", self.directory], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "nginx")

    def pids(self) -> list[int]:
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.process.pid:
                            children.append(int(entry))
                except (OSError, IndexError, ValueError):
                    pass
        return [self.process.pid, *children]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGQUIT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def cpu_user_system(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of all of `pids`."""
    splits = [bench.cpu_split(pid) for pid in pids]
    return sum(user for user, _ in splits), sum(system for _, system in splits)


def cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_user_system(pids))


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            total += int(next(line for line in f if line.startswith("VmRSS")).split()[1])
    return total


def wrk(port: int, connections: int, seconds: int) -> dict[str, float]:
    threads = min(connections, os.cpu_count() or 1)
    out = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--latency",
                          f"http://127.0.0.1:{port}{PATH}"], capture_output=True, text=True, check=True).stdout

    def micros(label: str) -> float:
        match = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert match, out
        return float(match.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[match.group(2)]
    requests = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    assert requests and rps, out
    return {"rps": float(rps.group(1)), "requests": int(requests.group(1)), "p50_us": micros("50%"),
            "p99_us": micros("99%"), "non_2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": sum(int(n) for n in socket_errors.groups()) if socket_errors else 0}


def errors(run: dict) -> int:
    """Answers not 2xx and wrk's socket errors in a run: a run with any measures no proxy's rate."""
    return run["non_2xx"] + run["socket_errors"]


def measure(port: int, pids: list[int], connections: int, seconds: int) -> dict[str, float]:
    user, system = cpu_user_system(pids)
    run = wrk(port, connections, seconds)
    user_after, system_after = cpu_user_system(pids)
    requests = max(run["requests"], 1)
    run["user_us_per_request"] = (user_after - user) * 1e6 / requests
    run["system_us_per_request"] = (system_after - system) * 1e6 / requests
    run["cpu_us_per_request"] = run["user_us_per_request"] + run["system_us_per_request"]
    run["rss_kib"] = rss_kib(pids)
    return run


class Stand:
    """tokend (logged in), the nginx upstream, nginx as the proxy and tokend-proxy, all on loopback."""

    def __init__(self, bin_dir: str, directory: str, before: str | None = None) -> None:
        self.directory = directory
        self.daemon = bench.Daemon(bin_dir, directory, bench.FakeEndpoint())
        self.nginxes: list[Nginx] = []
        self.proxy: subprocess.Popen | None = None
        self.before: subprocess.Popen | None = None
        try:
            token = self.daemon.call("GetToken")["parameters"]["token"]["accessToken"]
            self.up_port, self.nginx_port, self.proxy_port = free_port(), free_port(), free_port()
            self.token = token
            self.upstream = Nginx(os.path.join(directory, "upstream"), self.up_port,
                                  f"location / {{ default_type application/json; return 200 '{BODY}'; }}\n"
                                  f"    location = {CHECK} {{ if ($http_authorization != \"Bearer {token}\") {{ return 401; }} "
                                  "return 200; }")
            self.nginxes.append(self.upstream)
            self.nginx = Nginx(os.path.join(directory, "nginx-proxy"), self.nginx_port, f"""location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer {token}";
    }}""", http=f"upstream up {{ server 127.0.0.1:{self.up_port}; keepalive 64; }}")
            self.nginxes.append(self.nginx)
            self.proxy = self.start_proxy(os.path.join(bin_dir, "tokend-proxy"), self.proxy_port, "proxy.log")
            if before:
                self.before_port = free_port()
                self.before = self.start_proxy(before, self.before_port, "before.log")
        except BaseException:
            self.stop()
            raise

    def start_proxy(self, binary: str, port: int, log: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [binary, "--socket", self.daemon.socket, "--listen", f"tcp:127.0.0.1:{port}",
             "--upstream", f"http://127.0.0.1:{self.up_port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.directory, log), "w"),
            preexec_fn=bench.raise_nofile)
        wait_for_port(port, process, binary)
        return process

    def check(self, port: int, name: str) -> None:
        """A proxy on `port` puts the session's token on what it forwards: the upstream's check says so."""
        import urllib.error
        import urllib.request
        try:
            status = urllib.request.urlopen(f"http://127.0.0.1:{port}{CHECK}", timeout=10).status
        except urllib.error.HTTPError as error:
            status = error.code
        if status != 200:
            raise RuntimeError(f"{name} did not forward the session's token (the upstream answered {status})")

    def targets(self) -> dict[str, tuple[int, list[int]]]:
        assert self.proxy is not None
        targets = {"direct": (self.up_port, self.upstream.pids()), "nginx": (self.nginx_port, self.nginx.pids()),
                   "tokend-proxy": (self.proxy_port, [self.proxy.pid])}
        if self.before is not None:
            targets["tokend-proxy (before)"] = (self.before_port, [self.before.pid])
        return targets

    def stop(self) -> None:
        for process in (self.proxy, self.before):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for nginx in self.nginxes:
            nginx.stop()
        self.daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("results")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--before", help="an older tokend-proxy binary to run in the same rounds")
    args = parser.parse_args()
    if args.rounds % 2:
        parser.error("--rounds must be even: each order is run as often as the other")
    counts = [int(c) for c in args.connections.split(",")]
    bench.raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkproxy", dir="/tmp")
    stand = Stand(args.bin_dir, directory, before=args.before)
    try:
        targets = stand.targets()
        tokend_pid = stand.daemon.process.pid
        for name, (port, _) in targets.items():
            if name != "direct":
                stand.check(port, name)
            wrk(port, 16, 1)  # warm up: connections, caches, the proxy's token
        rounds: dict[str, dict[int, list]] = {name: {c: [] for c in counts} for name in targets}
        tokend_cpu: dict[tuple[str, int], list[float]] = {
            (name, c): [] for name in targets if name.startswith("tokend-proxy") for c in counts}
        for index in range(args.rounds):
            for connections in counts:
                # Every other round in the opposite order, so that no path is always measured right after another.
                order = list(targets.items()) if index % 2 == 0 else list(reversed(targets.items()))
                for name, (port, pids) in order:
                    tokend_before = cpu_seconds([tokend_pid])
                    run = measure(port, pids, connections, args.seconds)
                    rounds[name][connections].append(run)
                    if name.startswith("tokend-proxy"):
                        tokend_cpu[name, connections].append(
                            (cpu_seconds([tokend_pid]) - tokend_before) * 1e6 / max(run["requests"], 1))
        results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": bench.machine(),
                   "rounds": args.rounds, "seconds": args.seconds, "nginx_version": nginx_version(),
                   "wrk": wrk_version(), "before": args.before, "connections": counts}
        for name, by_count in rounds.items():
            results[name] = {str(c): {key: statistics.median(r[key] for r in runs) for key in runs[0]}
                             for c, runs in by_count.items()}
        # Against nginx: each round's proxy against nginx in the same round (measured next to each other),
        # the median of those ratios; the machine's speed drifts between rounds, less within one.
        for name in targets:
            if name.startswith("tokend-proxy"):
                for c in counts:
                    figures = results[name][str(c)]
                    pairs = list(zip(rounds[name][c], rounds["nginx"][c]))
                    figures["of_nginx_rounds"] = [round(x["rps"] / n["rps"], 3) for x, n in pairs]
                    figures["p50_x_nginx_rounds"] = [round(x["p50_us"] / n["p50_us"], 3) for x, n in pairs]
                    figures["of_nginx"] = statistics.median(figures["of_nginx_rounds"])
                    figures["p50_x_nginx"] = statistics.median(figures["p50_x_nginx_rounds"])
        results["runs"] = {name: {str(c): runs for c, runs in by_count.items()} for name, by_count in rounds.items()}
        results["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        for (name, c), values in tokend_cpu.items():
            results[name][str(c)]["tokend_cpu_us_per_request"] = statistics.median(values)
    finally:
        stand.stop()
    table = render(results)
    print(table)
    with open(args.results, "w") as f:
        f.write(table)
    with open(os.path.splitext(args.results)[0] + ".json", "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    shutil.rmtree(directory, ignore_errors=True)
    failed = [(name, c) for name, by_count in rounds.items() for c, runs in by_count.items()
              if any(errors(run) for run in runs)]
    if failed:
        sys.exit(f"answers that were not 2xx, or socket errors, in: {failed}; these figures are not a proxy's rate")


def nginx_version() -> str:
    return subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]


def wrk_version() -> str:
    out = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    return (out.stdout + out.stderr).split()[1]


def render(r: dict) -> str:
    command = (f"`.venv/bin/python bench/proxy_nginx.py .build/release RESULTS --before {r['before']}`" if r.get("before")
               else "`make bench-proxy`")
    out = [f"# tokend-proxy against nginx — {r['date']}", "", f"Machine: {r['machine']}.", "",
           f"Command: {command} (release build; wrk {r['wrk']}, keep-alive, {r['seconds']} s per run, "
           f"{r['rounds']} interleaved rounds, every other one in the opposite order). Upstream: nginx "
           f"{r['nginx_version']} returning a fixed {len(BODY)}-byte body. nginx as the proxy: `proxy_pass` to a keep-alive upstream, a fixed "
           "`Authorization` header. tokend-proxy: `--listen tcp:127.0.0.1:PORT`, the token of a logged-in "
           "tokend session. CPU per request: user + system of all the proxy's processes around the run (user "
           "and system apart in brackets)."
           + (f" tokend-proxy (before): `--before {r['before']}`, an older build in the same rounds." if r.get("before") else "")
           + f" Load average when the run ended: {r.get('load', '?')}.", "",
           "| connections | path | requests/s | of nginx | p50 (µs) | × nginx | p99 (µs) | CPU/request (µs) (user + system) | RSS (MiB) |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    names = [name for name in ("direct", "nginx", "tokend-proxy", "tokend-proxy (before)") if name in r]
    for c in r["direct"]:
        n = r["nginx"][c]
        for name in names:
            x = r[name][c]
            label = {"direct": "direct to the upstream", "nginx": "nginx as the proxy"}.get(name, name)
            proxy = name != "direct"
            # nginx against itself is 100 % and 1.00× by definition; the proxies have their paired ratios.
            of_nginx, p50_x = (x["of_nginx"], x["p50_x_nginx"]) if name.startswith("tokend-proxy") else (1.0, 1.0)
            cpu = f"{x['cpu_us_per_request']:.1f} ({x['user_us_per_request']:.1f} + {x['system_us_per_request']:.1f})"
            out.append(f"| {c} | {label} | {x['rps']:,.0f} | " + (f"{of_nginx:.0%}" if proxy else "")
                       + f" | {x['p50_us']:,.0f} | " + (f"{p50_x:.2f}×" if proxy else "")
                       + f" | {x['p99_us']:,.0f} | " + (cpu if proxy else "")
                       + " | " + (f"{x['rss_kib'] / 1024:.1f}" if proxy else "") + " |")
    out += ["", "Requests/s, p50, p99 and CPU are medians over the rounds; \"of nginx\" and \"× nginx\" are "
            "medians of each round's ratio to nginx in the same round."]
    for name in names[2:]:
        medians = "; ".join(f"{r[name][c]['rps'] / r['nginx'][c]['rps']:.0%}, "
                            f"{r[name][c]['p50_us'] / r['nginx'][c]['p50_us']:.2f}× at {c}" for c in r[name])
        rps = "; ".join(f"{', '.join(f'{v:.0%}' for v in r[name][c]['of_nginx_rounds'])} at {c}" for c in r[name])
        p50 = "; ".join(f"{', '.join(f'{v:.2f}×' for v in r[name][c]['p50_x_nginx_rounds'])} at {c}" for c in r[name])
        out += ["", f"{name} against nginx as the ratio of the medians instead: {medians}. Round by round, "
                f"requests/s: {rps}; p50: {p50}."]
        cpu = ", ".join(f"{r[name][c]['tokend_cpu_us_per_request']:.2f} µs at {c}" for c in r[name])
        out += ["", f"tokend's own CPU per request through {name}: {cpu}."]
    runs = [run for name in names for by_count in r["runs"][name].values() for run in by_count]
    out += ["", f"Non-2xx answers: {sum(run['non_2xx'] for run in runs)}; socket errors (wrk's connect, read, "
                f"write and timeout): {sum(run['socket_errors'] for run in runs)}. Each proxy's token was checked at the "
                "upstream before the rounds."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
