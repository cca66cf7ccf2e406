"""make bench-dpop: what DPoP costs (issue 42), in one run.

    python3 bench/dpop_bench.py BIN_DIR RESULTS_FILE [--calls N]

Glewlwyd with DPoP required (Tests/integration/provider2.py) and swtpm in
socket mode; one tokend with three sessions logged in by the device flow: a
Bearer one, a DPoP one with its key in the state, a DPoP one with its key in
swtpm. Measured on one Varlink connection, call after call: a cached GetToken
on each (what a DPoP session costs on the path every client takes), and
GetProof on each DPoP session (a proof: one ES256 signature in process, or
one TPM2_Sign with a primary key made, the key loaded and both flushed).
Writes the table, with date and machine, to RESULTS_FILE.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "integration"))
import provider2  # noqa: E402
from provider2 import CLIENT_ID, CLIENT_SECRET, DPOP_CLIENT_ID, SCOPE, Glewlwyd  # noqa: E402
from test_dpop import SwTPM  # noqa: E402


class Connection:
    """One Varlink connection, calls one after another."""

    def __init__(self, path):
        self.socket = socket.socket(socket.AF_UNIX)
        self.socket.connect(path)
        self.buffer = b""

    def call(self, name, parameters):
        self.socket.sendall(json.dumps({"method": "io.tokend.Broker." + name, "parameters": parameters}).encode() + b"\0")
        while b"\0" not in self.buffer:
            chunk = self.socket.recv(65536)
            assert chunk, "tokend closed the connection"
            self.buffer += chunk
        frame, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(frame)


def timed(connection, calls, name, parameters):
    reply = connection.call(name, parameters)
    assert "error" not in reply, reply
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        reply = connection.call(name, parameters)
        took.append(time.perf_counter() - started)
        assert "error" not in reply, reply
    took.sort()
    return {"calls": calls, "p50_us": round(took[len(took) // 2] * 1e6), "p99_us": round(took[int(len(took) * 0.99)] * 1e6),
            "per_second": round(calls / sum(took))}


def login(tokenctl, socket_path, session, provider):
    process = subprocess.Popen([tokenctl, "login", "--device", "--session", session, "--socket", socket_path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        line = process.stdout.readline()
        assert line, process.stderr.read()
        if line.startswith("Or open "):
            break
    provider.approve_device(urllib.parse.parse_qs(urllib.parse.urlparse(line.split()[-1]).query)["code"][0])
    assert process.wait(60) == 0, process.stderr.read()


def start_tokend(bin_dir, directory, provider, tpm):
    """tokend with three sessions of one provider (bearer; state and tpm: DPoP, the key in the state and in
    swtpm), each logged in: the process and its socket."""
    secret = os.path.join(directory, "secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(CLIENT_SECRET + "\n")
    socket_path = os.path.join(directory, "sock")
    common = [f'issuer = "{provider.issuer}"', f'scope = "{SCOPE}"', 'client-auth = "basic"',
              f'client-secret-file = "{secret}"']
    config = ["[daemon]", f'socket = "{socket_path}"', f'state-directory = "{directory}/state"', f'tpm = "{tpm.tcti}"',
              "[sessions.bearer]", f'client-id = "{CLIENT_ID}"', *common,
              "[sessions.state]", f'client-id = "{DPOP_CLIENT_ID}"', "dpop = true", 'dpop-key = "state"', *common,
              "[sessions.tpm]", f'client-id = "{DPOP_CLIENT_ID}"', "dpop = true", 'dpop-key = "tpm"', *common]
    with open(os.path.join(directory, "tokend.toml"), "w") as f:
        f.write("\n".join(config) + "\n")
    log = open(os.path.join(directory, "tokend.log"), "w")
    daemon = subprocess.Popen([os.path.join(bin_dir, "tokend"), "--config", os.path.join(directory, "tokend.toml")],
                              stdout=log, stderr=log)
    deadline = time.time() + 20
    while not os.path.exists(socket_path):
        assert time.time() < deadline and daemon.poll() is None, "tokend did not start"
        time.sleep(0.05)
    for session in ("bearer", "state", "tpm"):
        login(os.path.join(bin_dir, "tokenctl"), socket_path, session, provider)
    return daemon, socket_path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("results")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="tkdpop", dir="/tmp")
    provider = Glewlwyd(os.path.join(directory, "g2"), dpop=True)
    tpm = SwTPM(os.path.join(directory, "tpm"))
    daemon = None
    try:
        daemon, socket_path = start_tokend(args.bin_dir, directory, provider, tpm)
        connection = Connection(socket_path)
        url = provider.issuer + "/userinfo"
        rows = []
        # Interleaved rounds, so that the machine's other load falls on every kind alike.
        results = {}
        registered = "error" not in connection.call("GetProof", {"session": "state", "method": "GET", "url": url})
        kinds = [
            ("GetToken, Bearer session (cached)", "GetToken", "bearer", {}, args.calls),
            ("GetToken, DPoP session, key in the state (cached)", "GetToken", "state", {}, args.calls),
            ("GetToken, DPoP session, key in swtpm (cached)", "GetToken", "tpm", {}, args.calls),
            ("GetProof, key in the state", "GetProof", "state", {"method": "GET", "url": url}, 40),
            ("GetProof, key in swtpm", "GetProof", "tpm", {"method": "GET", "url": url}, 40),
        ]
        for round_ in range(3):
            # Each round starts with another kind: none is always the first (the coldest).
            for name, method, session, parameters, calls in kinds[round_:] + kinds[:round_]:
                if method == "GetProof" and not registered:
                    continue  # a build where GetProof is declared but not registered
                if method == "GetProof":
                    time.sleep(2.1)  # the per-person bucket (burst 50) is full again
                results.setdefault(name, []).append(timed(connection, calls, method, {"session": session, **parameters}))
        for name, *_ in kinds:
            runs = results.get(name)
            if not runs:
                continue
            rows.append((name, statistics.median(r["p50_us"] for r in runs), statistics.median(r["p99_us"] for r in runs),
                         statistics.median(r["per_second"] for r in runs), runs[0]["calls"]))
        machine = f"{os.uname().nodename}, {os.cpu_count()} cores, {os.uname().release}"
        commit = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "?"
        lines = [f"# DPoP costs (make bench-dpop, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
                 f"Machine: {machine}. Binaries: {args.bin_dir} (the work tree at {commit}). One Varlink connection, one call after another; "
                 "median of 3 interleaved rounds.", "",
                 "| call | calls per round | p50 | p99 | calls/s |", "| --- | ---: | ---: | ---: | ---: |"]
        for name, p50, p99, per_second, calls in rows:
            lines.append(f"| {name} | {calls} | {p50:.0f} µs | {p99:.0f} µs | {per_second:.0f} |")
        if not registered:
            lines.append("| GetProof | not registered in this build | | | |")
        with open(args.results, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
        tpm.stop()
        provider.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
