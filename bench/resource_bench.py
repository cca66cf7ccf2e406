"""make bench (bench-resources): a cached GetToken naming a resource against
one naming none, and the C limit server, in one run with one load client.

    python3 bench/resource_bench.py BIN_DIR LOAD LIMIT_SERVER RESULTS_FILE [--rounds N]

tokend serves one session with two resources (RFC 8707) from a loopback token
endpoint; both keys are cached before the load starts, so every call is
answered from the cache. Three request kinds are interleaved round by round:
the limit server, GetToken with no resource, GetToken naming a resource.
Writes the table, with date and machine, to RESULTS_FILE.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Daemon, FakeEndpoint, machine, median_of, raise_nofile, socket_suite  # noqa: E402

RESOURCE = "https://api-a.example.com/"
PLAIN = '{"method":"io.tokend.Broker.GetToken","parameters":{}}'
GUARDED = '{"method":"io.tokend.Broker.GetToken","parameters":{"session":"guarded"}}'
NAMED = json.dumps({"method": "io.tokend.Broker.GetToken", "parameters": {"resource": RESOURCE}},
                   separators=(",", ":"))


def start(bin_dir, directory, endpoint):
    """tokend with the default session serving two resources, both keys cached; and a session "guarded"
    like it with resource-access (the caller, root, admitted), so that every answer passes the audience
    rule (security round four): its token's audience is not confirmed, so it covers both resources."""
    resources = f'resources = ["{RESOURCE}", "https://api-b.example.com/"]'
    daemon = Daemon(bin_dir, directory, endpoint, max_connections=1000, default_keys=[resources], sessions=[
        "[sessions.guarded]", f'token-endpoint = "{endpoint.url}/fast/token"', 'client-id = "bench"',
        'client-auth = "none"', resources,
        '[sessions.guarded.resource-access]', '"https://api-b.example.com/" = { read-users = ["0"] }'])
    tokenctl = os.path.join(bin_dir, "tokenctl")
    for extra in ([], ["--resource", RESOURCE], ["--session", "guarded"]):
        subprocess.run([tokenctl, "token", "--socket", daemon.socket, *extra], check=True, capture_output=True)
    return daemon


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("load")
    parser.add_argument("limit_server")
    parser.add_argument("results")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkres", dir="/tmp")
    endpoint = FakeEndpoint()
    daemon = start(args.bin_dir, directory, endpoint)
    process, sock = daemon.process, daemon.socket
    limit_socket = os.path.join(directory, "limit.sock")
    # The limit server answers with a reply as long as the longer of tokend's two.
    reply = subprocess.run([os.path.join(args.bin_dir, "tokenctl"), "token", "--socket", sock, "--resource", RESOURCE],
                           check=True, capture_output=True, text=True).stdout
    reply_bytes = 160 + len(reply) + len(RESOURCE)
    limit = subprocess.Popen([args.limit_server, limit_socket, str(reply_bytes)], stdout=subprocess.PIPE, text=True)
    assert limit.stdout.readline().strip() == "ready"
    calls_before = endpoint.count("/fast/token")
    rounds = {"limit": [], "no resource": [], "resource": [], "guarded": []}
    try:
        for _ in range(args.rounds):
            rounds["limit"].append(socket_suite(args.load, limit_socket, PLAIN, limit.pid))
            rounds["no resource"].append(socket_suite(args.load, sock, PLAIN, process.pid))
            rounds["resource"].append(socket_suite(args.load, sock, NAMED, process.pid))
            rounds["guarded"].append(socket_suite(args.load, sock, GUARDED, process.pid))
    finally:
        daemon.stop()
        limit.terminate()
    refreshes = endpoint.count("/fast/token") - calls_before
    rows = [("p50 latency (µs, 1 connection)", "latency", "p50_us"), ("p99 latency (µs)", "latency", "p99_us"),
            ("calls/s, 16 connections", "rps_16x1", None), ("CPU per call (µs, 16 connections)",
                                                            "cpu_us_per_call_16x1", None)]
    lines = [f"# Cached GetToken with and without a resource (make bench, {time.strftime('%Y-%m-%d')}, "
             f"{machine()})", "",
             f"`python3 bench/resource_bench.py .build/release LOAD LIMIT_SERVER {args.results}`: "
             f"median of {args.rounds} interleaved rounds; both keys cached before the load "
             f"({refreshes} upstream calls during it).", "",
             "| | limit server | GetToken | GetToken naming a resource | GetToken under resource-access |",
             "|---|---:|---:|---:|---:|"]
    for label, key, field in rows:
        values = [median_of(rounds[target], key, field) for target in ("limit", "no resource", "resource", "guarded")]
        lines.append(f"| {label} | " + " | ".join(f"{v:,.1f}" for v in values) + " |")
    text = "\n".join(lines) + "\n"
    with open(args.results, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
