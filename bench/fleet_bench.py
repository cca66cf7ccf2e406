"""The fleet row: three tokend hosts sharing a session through a real
PostgreSQL 15; how long after one host's refresh the other hosts have the new
token. Host A refreshes (compare-and-refresh, one after another); each host's
subscriber notes when its `refreshed` event arrives (a host tells subscribers
just before it hands the token to callers). The figure is B's and C's arrival
minus A's, per refresh.

    python bench/fleet_bench.py BIN_DIR [--refreshes N]    (bench.py calls measure())
"""
import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Tests", "integration"))
import conftest  # noqa: E402
import fleet as fleet_module  # noqa: E402


class Subscriber:
    def __init__(self, path):
        self.arrived = {}  # generation -> time the refreshed event arrived
        self.socket = socket.socket(socket.AF_UNIX)
        self.socket.connect(path)
        self.socket.sendall(b'{"method":"io.tokend.Broker.Subscribe","parameters":{},"more":true}\0')
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                event = json.loads(conftest.read_frame(self.socket))["parameters"]
                if event.get("event") == "refreshed":
                    self.arrived[event["generation"]] = time.perf_counter()
        except (OSError, ConnectionError, ValueError):
            pass


def percentile(samples, fraction):
    samples = sorted(samples)
    return samples[min(len(samples) - 1, int(len(samples) * fraction))]


def measure(bin_dir, directory, token_url, refreshes=200):
    conftest.BIN = fleet_module.BIN = bin_dir
    work = os.path.join(directory, "fleet")
    os.makedirs(work)
    os.chmod(directory, 0o711)  # postgres must pass through to its directory
    pg = fleet_module.Postgres(os.path.join(work, "pg"))
    server = types.SimpleNamespace(token_url=token_url, base=token_url.rsplit("/", 2)[0])
    hosts = fleet_module.Fleet(work, server, pg, **{"refresh-margin": 5, "min-valid": 3})
    try:
        hosts.start()
        result = hosts["a"].ctl("login", input="bench-refresh-token\n")
        assert result.returncode == 0, result.stderr
        hosts.wait_generation(hosts.status("a")["generation"])
        subscribers = {name: Subscriber(hosts[name].socket) for name in "abc"}
        time.sleep(0.2)
        delays = []
        for _ in range(refreshes):
            generation = hosts["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
            reply = hosts["a"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
            new = reply["parameters"]["token"]["generation"]
            conftest.wait_for(lambda: all(new in s.arrived for s in subscribers.values()), 10, "the other hosts")
            delays += [subscribers[name].arrived[new] - subscribers["a"].arrived[new] for name in "bc"]
        return {"refreshes": refreshes, "p50_ms": percentile(delays, 0.5) * 1000,
                "p99_ms": percentile(delays, 0.99) * 1000, "max_ms": max(delays) * 1000}
    finally:
        hosts.stop()
        pg.stop("immediate")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--refreshes", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    from bench import FakeEndpoint
    endpoint = FakeEndpoint()
    directory = tempfile.mkdtemp(prefix="tkfleet", dir="/tmp")
    try:
        print(json.dumps(measure(args.bin_dir, directory, endpoint.url + "/fast/token", args.refreshes)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
