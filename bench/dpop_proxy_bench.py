"""What a DPoP-bound session costs through tokend-proxy (issue 42), in one run.

    python3 bench/dpop_proxy_bench.py BIN_DIR RESULTS_FILE [--requests 40] [--rounds 3]

Glewlwyd with DPoP required and swtpm in socket mode, as in bench/dpop_bench.py: one tokend with a
Bearer session, a DPoP one with its key in the state and a DPoP one with its key in swtpm, each logged
in by the device flow; one tokend-proxy per session in front of the same upstream (a Python HTTP/1.1
server on loopback that answers 200 to anything, so that the proxies' costs are what differs). One
keep-alive client sends requests one after another: the upstream directly, then each proxy, in
interleaved rounds of --requests (within tokend's bound on proofs, and a pause for the bucket to fill
between rounds). tokend bounds GetProof per person and session (tokend(8)): with the key in the state 200
a second, bursts of 400; with the key in a TPM a quarter of what the TPM signs a second, bursts of two
seconds' worth, from its measured signing time (150 ms until the first proof: the warm-up's two proofs
measure it). Either bucket fills again within two seconds. Then the bound itself: BURST requests in a
row through the DPoP proxy (state key), more than its burst of 400, as fast as they are answered,
counting 200s and 503s. Writes its section of RESULTS_FILE (between
markers, the rest of the file as it was).
"""
import argparse
import http.client
import http.server
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "integration"))
from dpop_bench import Connection, start_tokend  # noqa: E402
from provider2 import Glewlwyd  # noqa: E402
from test_dpop import SwTPM  # noqa: E402

BEGIN, END = "<!-- tokend-proxy: bench/dpop_proxy_bench.py -->", "<!-- end tokend-proxy -->"
# Requests in a row to show the bound: more than the burst of 400 a session with its key in the state has.
BURST = 600


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        # One write: a head and a body written apart meet Nagle and delayed ACKs (40 ms a request).
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_proxy(bin_dir, socket_path, session, upstream, directory):
    port = free_port()
    log = open(os.path.join(directory, f"proxy-{session}.log"), "w")
    process = subprocess.Popen([os.path.join(bin_dir, "tokend-proxy"), "--socket", socket_path, "--session", session,
                                "--listen", f"tcp:127.0.0.1:{port}", "--upstream", upstream], stdout=log, stderr=log)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            assert time.time() < deadline and process.poll() is None, "tokend-proxy did not start"
            time.sleep(0.05)


def timed(port, requests):
    """`requests` GETs one after another on one connection: the latencies of those answered 200, and the statuses."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took, statuses = [], []
    try:
        for _ in range(requests):
            started = time.perf_counter()
            connection.request("GET", "/v1/items", headers={"Host": f"127.0.0.1:{port}"})
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
            if response.status == 200:
                took.append(time.perf_counter() - started)
    finally:
        connection.close()
    return took, statuses


def proofs(connection, url, calls):
    """GetProof `calls` times on one Varlink connection: what a DPoP request through the proxy adds, at least."""
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        reply = connection.call("GetProof", {"session": "state", "method": "GET", "url": url + "/v1/items"})
        took.append(time.perf_counter() - started)
        assert "error" not in reply, reply
    return took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("results")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    assert args.requests <= 50, "one round must fit tokend's burst of proofs"
    directory = tempfile.mkdtemp(prefix="tkdpopproxy", dir="/tmp")
    provider = Glewlwyd(os.path.join(directory, "g2"), dpop=True)
    tpm = SwTPM(os.path.join(directory, "tpm"))
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    upstream_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    processes = []
    try:
        daemon, socket_path = start_tokend(args.bin_dir, directory, provider, tpm)
        processes.append(daemon)
        ports = {"upstream directly": upstream.server_address[1]}
        names = {"bearer": "tokend-proxy, Bearer session", "state": "tokend-proxy, DPoP session, key in the state",
                 "tpm": "tokend-proxy, DPoP session, key in swtpm"}
        for session, name in names.items():
            process, port = start_proxy(args.bin_dir, socket_path, session, upstream_url, directory)
            processes.append(process)
            ports[name] = port
        for port in ports.values():
            timed(port, 2)  # warm: connections, the proxy's token, the first proofs
        time.sleep(2.6)
        kinds = list(ports) + ["GetProof alone (key in the state), one Varlink connection"]
        varlink = Connection(socket_path)
        results = {}
        for round_ in range(args.rounds):
            for name in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:
                if "key in the state" in name:
                    time.sleep(2.6)  # tokend's bucket of proofs for the session is full again (400 at 200 a second)
                if name not in ports:
                    took = proofs(varlink, upstream_url, args.requests)
                    took.sort()
                    results.setdefault(name, []).append((took[len(took) // 2], took[int(len(took) * 0.99)], len(took) / sum(took)))
                    continue
                took, statuses = timed(ports[name], args.requests)
                assert statuses == [200] * args.requests, (name, statuses)
                took.sort()
                results.setdefault(name, []).append((took[len(took) // 2], took[int(len(took) * 0.99)], len(took) / sum(took)))
            time.sleep(2.6)
        started = time.perf_counter()
        _, statuses = timed(ports[names["state"]], BURST)
        burst_seconds = time.perf_counter() - started
        machine = f"{os.uname().nodename}, {os.cpu_count()} cores, {os.uname().release}"
        commit = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "?"
        lines = [BEGIN, "", f"## Through tokend-proxy (bench/dpop_proxy_bench.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
                 f"Machine: {machine}. Binaries: {args.bin_dir} (the work tree at {commit}). One keep-alive client, one GET after "
                 f"another, {args.requests} per round; median of {args.rounds} interleaved rounds. The upstream is a Python server "
                 "on loopback (its own time is in every row). A DPoP request costs one GetProof (the Bearer one is served from "
                 "the proxy's cache): a DPoP row less the Bearer row is GetProof itself and the hops from the proxy's "
                 "loop to its tokend connection and back.", "",
                 "| path | p50 | p99 | requests/s |", "| --- | ---: | ---: | ---: |"]
        for name in kinds:
            runs = results[name]
            lines.append(f"| {name} | {statistics.median(r[0] for r in runs) * 1e6:.0f} µs | "
                         f"{statistics.median(r[1] for r in runs) * 1e6:.0f} µs | {statistics.median(r[2] for r in runs):.0f} |")
        lines += ["", f"tokend's bound on proofs with the key in the state (200 a second per person and session, bursts of 400): "
                  f"{BURST} requests in a row through "
                  f"the DPoP proxy (state key) took {burst_seconds:.1f} s; {statuses.count(200)} were answered 200, "
                  f"{statuses.count(503)} 503 with Retry-After.", "", END]
        section = "\n".join(lines) + "\n"
        text = open(args.results).read() if os.path.exists(args.results) else ""
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip("\n") + ("\n\n" if text else "") + section
        with open(args.results, "w") as f:
            f.write(text)
        print(section)
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(10)
        upstream.shutdown()
        tpm.stop()
        provider.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
