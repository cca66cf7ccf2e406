"""Flood: does a well-behaved client stay fast while tokend holds 10,000 idle
connections and 1,000 clients that sent half a message and stalled?

    python bench/flood.py BIN_DIR [--idle 10000] [--stalled 1000] [--calls 3000]

Measures one client's cached GetToken latency (one connection, calls one
after another; and a new connection per call) on an idle tokend, then again
under the flood, against the real test authorization server. Prints a
Markdown table and a JSON line.
"""
import argparse
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Tests", "integration"))
from conftest import AuthServer, Tokend, login  # noqa: E402

REQUEST = b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0'


def percentiles(samples):
    samples = sorted(samples)
    return {"p50_us": round(samples[len(samples) // 2] * 1e6), "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6)}


def call(s):
    s.sendall(REQUEST)
    data = b""
    while not data.endswith(b"\0"):
        chunk = s.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    assert b'"accessToken"' in data, data


def measure(path, calls):
    kept = socket.socket(socket.AF_UNIX)
    kept.connect(path)
    persistent = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call(kept)
        persistent.append(time.perf_counter() - t0)
    kept.close()
    fresh = []
    for _ in range(calls // 3):
        t0 = time.perf_counter()
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        call(s)
        fresh.append(time.perf_counter() - t0)
        s.close()
    return {"persistent": percentiles(persistent), "connect_and_call": percentiles(fresh)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--stalled", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    os.environ["TOKEND_BIN"] = os.path.abspath(args.bin)
    import conftest
    conftest.BIN = os.path.abspath(args.bin)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = args.idle + args.stalled + 256
    assert hard >= needed, f"the open-file limit ({hard}) is below {needed}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    directory = tempfile.mkdtemp(prefix="tkf", dir="/tmp")
    server = AuthServer(os.path.join(directory, "as"))
    daemon = Tokend(directory, server, daemon={"max-connections": needed, "frame-timeout": 120})
    held = []
    try:
        daemon.start()
        login(daemon, server)
        measure(daemon.socket, 300)  # warm up
        idle = measure(daemon.socket, args.calls)
        for _ in range(args.idle):
            s = socket.socket(socket.AF_UNIX)
            s.connect(daemon.socket)
            held.append(s)
        for _ in range(args.stalled):
            s = socket.socket(socket.AF_UNIX)
            s.connect(daemon.socket)
            s.sendall(b'{"method":"io.tokend.Broker.GetTo')
            held.append(s)
        time.sleep(1)
        flooded = measure(daemon.socket, args.calls)
        assert daemon.process.poll() is None
    finally:
        for s in held:
            s.close()
        daemon.stop()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    result = {"idle_connections": args.idle, "stalled_half_messages": args.stalled, "calls": args.calls,
              "idle_tokend": idle, "flooded": flooded}
    print("| one client's cached GetToken | idle tokend p50 / p99 | 10,000 idle + 1,000 stalled p50 / p99 | p99 ratio |")
    print("| --- | --- | --- | ---: |")
    for kind, label in (("persistent", "on its connection"), ("connect_and_call", "new connection per call")):
        a, b = idle[kind], flooded[kind]
        print(f"| {label} | {a['p50_us']} / {a['p99_us']} µs | {b['p50_us']} / {b['p99_us']} µs | "
              f"{b['p99_us'] / a['p99_us']:.2f}× |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
