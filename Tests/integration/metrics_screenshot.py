"""docs/prometheus-refreshes.png: a real Prometheus graphing a real tokend's
refreshes and coalesced askers through stampedes of workers against the test
authorization server, its /graph page shot by headless Chromium.
Usage: metrics_screenshot.py OUTPUT.png (run from the repository, after `make build`)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from conftest import AuthServer, Tokend, free_port  # noqa: E402
from prometheus import Prometheus  # noqa: E402
from test_metrics import stampede  # noqa: E402


def main(output: str) -> None:
    directory = tempfile.mkdtemp(prefix="tkshot", dir="/tmp")
    server = AuthServer(os.path.join(directory, "as"))
    port = free_port()
    daemon = Tokend(directory, server, daemon={"metrics-listen": f'"127.0.0.1:{port}"'})
    prometheus = None
    try:
        daemon.start()
        status, grant = server.password_grant()
        assert status == 200, grant
        daemon.call("io.tokend.Broker.Login", refreshToken=grant["refresh_token"])
        prometheus = Prometheus(directory, {"tokend": f"127.0.0.1:{port}"})
        # Pools of 20 to 100 workers whose shared token was refused at once, every 6 seconds.
        for size in (100, 40, 100, 20, 60, 100, 80, 100, 50, 100):
            generation = daemon.call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
            stampede(daemon.socket, generation, size)
            time.sleep(6)
        panels = {
            "g0": "tokend_session_refreshes_total",
            "g1": "tokend_session_coalesced_total",
        }
        query = {}
        for panel, expression in panels.items():
            query.update({f"{panel}.expr": expression, f"{panel}.tab": "0", f"{panel}.range_input": "1m",
                          f"{panel}.stacked": "0", f"{panel}.show_exemplars": "0"})
        url = f"{prometheus.base}/graph?{urllib.parse.urlencode(query)}"
        profile = os.path.join(directory, "chromium")
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                        "--hide-scrollbars", "--window-size=1400,1640", "--virtual-time-budget=15000",
                        f"--screenshot={os.path.abspath(output)}", url],
                       check=True, capture_output=True, timeout=120)
        print(f"{output}: {url}")
    finally:
        if prometheus:
            prometheus.stop()
        daemon.stop()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
