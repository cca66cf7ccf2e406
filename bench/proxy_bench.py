"""tokend-proxy's cost: the same GET against the test API directly (TCP) and
through the proxy (its Unix socket), each on 4 keep-alive connections, one
after the other; requests/s and p50 latency, and their ratio."""
import http.client
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Tests", "integration"))
from testapi import TestAPI  # noqa: E402


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def run(connect, requests_per_connection=500, connections=4):
    samples, lock = [], threading.Lock()

    def one():
        connection = connect()
        mine = []
        for _ in range(requests_per_connection):
            started = time.perf_counter()
            connection.request("GET", "/data", headers={"Authorization": "Bearer direct"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status
            mine.append(time.perf_counter() - started)
        with lock:
            samples.extend(mine)
    started = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"rps": len(samples) / elapsed, "p50_us": statistics.median(samples) * 1e6}


def measure(bin_dir, directory, tokend_socket):
    api = TestAPI()
    path = os.path.join(directory, "proxy.sock")
    proxy = subprocess.Popen([os.path.join(bin_dir, "tokend-proxy"), "--socket", tokend_socket, "--listen",
                              f"unix:{path}", "--upstream", api.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while not os.path.exists(path):
            assert time.time() < deadline and proxy.poll() is None, "tokend-proxy did not start"
            time.sleep(0.05)
        port = int(api.url.rsplit(":", 1)[1])
        direct, through = [], []
        for _ in range(3):  # interleaved rounds, medians
            direct.append(run(lambda: http.client.HTTPConnection("127.0.0.1", port)))
            through.append(run(lambda: UnixHTTPConnection(path)))
        result = {key: {"rps": statistics.median(r["rps"] for r in rounds),
                        "p50_us": statistics.median(r["p50_us"] for r in rounds)}
                  for key, rounds in (("direct", direct), ("proxy", through))}
        return result
    finally:
        proxy.terminate()
        proxy.wait(10)
        api.stop()
