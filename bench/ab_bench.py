"""make bench-ab: cached GetToken in two builds of tokend, in one run with one load client, rounds
interleaved (and every other round in reverse order), to show what a change costs on the path
every caller takes.

    python3 bench/ab_bench.py BEFORE_BIN AFTER_BIN LOAD RESULTS_FILE [--rounds N]

Each build serves the same configuration: the default session with two resources (RFC 8707) and a
session "guarded" like it whose resource-access admits the caller (root), so that in a build with
security round four every answer passes the audience rule. Both keys of both sessions are cached
before the load. BEFORE_BIN and AFTER_BIN are directories with tokend and tokenctl (for example
.build/release of two checkouts).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Daemon, FakeEndpoint, machine, median_of, raise_nofile, socket_suite  # noqa: E402

RESOURCE = "https://api-a.example.com/"
RESOURCES = f'resources = ["{RESOURCE}", "https://api-b.example.com/"]'
REQUESTS = {
    "GetToken": '{"method":"io.tokend.Broker.GetToken","parameters":{}}',
    "GetToken naming a resource": '{"method":"io.tokend.Broker.GetToken","parameters":{"resource":"%s"}}' % RESOURCE,
    "GetToken under resource-access": '{"method":"io.tokend.Broker.GetToken","parameters":{"session":"guarded"}}',
}


def start(bin_dir, directory, endpoint):
    daemon = Daemon(bin_dir, directory, endpoint, max_connections=1000, default_keys=[RESOURCES], sessions=[
        "[sessions.guarded]", f'token-endpoint = "{endpoint.url}/fast/token"', 'client-id = "bench"',
        'client-auth = "none"', RESOURCES,
        "[sessions.guarded.resource-access]", '"https://api-b.example.com/" = { read-users = ["0"] }'])
    tokenctl = os.path.join(bin_dir, "tokenctl")
    for extra in ([], ["--resource", RESOURCE], ["--session", "guarded"]):
        subprocess.run([tokenctl, "token", "--socket", daemon.socket, *extra], check=True, capture_output=True)
    return daemon


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("load")
    parser.add_argument("results")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    raise_nofile()
    endpoint = FakeEndpoint()
    builds = {"before": args.before, "after": args.after}
    daemons = {name: start(path, tempfile.mkdtemp(prefix=f"tkab-{name}", dir="/tmp"), endpoint)
               for name, path in builds.items()}
    calls_before = endpoint.count("/fast/token")
    rounds = {(name, kind): [] for name in builds for kind in REQUESTS}
    try:
        for index in range(args.rounds):
            order = list(builds) if index % 2 == 0 else list(reversed(builds))
            for kind, request in REQUESTS.items():
                for name in order:
                    daemon = daemons[name]
                    rounds[(name, kind)].append(socket_suite(args.load, daemon.socket, request, daemon.process.pid))
    finally:
        for daemon in daemons.values():
            daemon.stop()
    refreshes = endpoint.count("/fast/token") - calls_before
    lines = [f"# Cached GetToken, before and after (make bench-ab, {time.strftime('%Y-%m-%d')}, {machine()})", "",
             f"`python3 bench/ab_bench.py {args.before} {args.after} LOAD {args.results}`: median of {args.rounds} "
             f"interleaved rounds (every other one in reverse order); every key cached before the load "
             f"({refreshes} upstream calls during it).", "",
             "| | build | p50 µs (1 connection) | p99 µs | calls/s, 16 connections | CPU µs per call, 16 connections |",
             "|---|---|---:|---:|---:|---:|"]
    for kind in REQUESTS:
        for name in builds:
            data = rounds[(name, kind)]
            lines.append(f"| {kind} | {name} | {median_of(data, 'latency', 'p50_us'):,.1f} | "
                         f"{median_of(data, 'latency', 'p99_us'):,.1f} | {median_of(data, 'rps_16x1'):,.0f} | "
                         f"{median_of(data, 'cpu_us_per_call_16x1'):,.2f} |")
    text = "\n".join(lines) + "\n"
    with open(args.results, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
