"""A real Prometheus and node_exporter on free loopback ports, each with its
own temporary storage, and the checks the metrics must pass: promtool for the
Prometheus text format, prometheus_client's strict parser for OpenMetrics."""
import json
import os
import signal
import subprocess
import urllib.parse
import urllib.request
from typing import Optional

from conftest import free_port, wait_for


class Process:
    def __init__(self, command: list, log_path: str) -> None:
        self.log_path = log_path
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log_path, "a"),
                                        start_new_session=True)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def logs(self) -> str:
        with open(self.log_path) as f:
            return f.read()


def get(url: str, headers: Optional[dict] = None) -> tuple:
    """(status, content type, body) of a GET, HTTP errors included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


class NodeExporter(Process):
    """node_exporter with only the textfile collector, reading `directory`."""

    def __init__(self, directory: str, workdir: str) -> None:
        self.port = free_port()
        super().__init__(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{self.port}",
                          "--collector.disable-defaults", "--collector.textfile",
                          f"--collector.textfile.directory={directory}"],
                         os.path.join(workdir, "node_exporter.log"))
        wait_for(lambda: self._up(), 20, "node_exporter")

    def _up(self) -> bool:
        try:
            return get(f"http://127.0.0.1:{self.port}/metrics")[0] == 200
        except OSError:
            return False


class Prometheus(Process):
    """Prometheus scraping `targets` ({job: "host:port"}) every second."""

    def __init__(self, workdir: str, targets: dict) -> None:
        self.port = free_port()
        config = os.path.join(workdir, "prometheus.yml")
        jobs = "".join(f"  - job_name: {job}\n    static_configs: [{{targets: ['{target}']}}]\n"
                       for job, target in targets.items())
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n" + jobs)
        super().__init__(["prometheus", f"--config.file={config}",
                          f"--storage.tsdb.path={os.path.join(workdir, 'prometheus-data')}",
                          f"--web.listen-address=127.0.0.1:{self.port}"],
                         os.path.join(workdir, "prometheus.log"))
        self.base = f"http://127.0.0.1:{self.port}"
        wait_for(lambda: self._ready(), 60, "prometheus")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.logs()[-2000:]}")
        try:
            return get(self.base + "/-/ready")[0] == 200
        except OSError:
            return False

    def query(self, expression: str) -> list:
        status, _, body = get(self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expression}))
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", body
        return answer["data"]["result"]

    def value(self, expression: str) -> Optional[float]:
        """The single value `expression` has now, or None when it has none."""
        result = self.query(expression)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def targets(self) -> list:
        return json.loads(get(self.base + "/api/v1/targets")[2])["data"]["activeTargets"]


def promtool_check(text: str) -> subprocess.CompletedProcess:
    """`promtool check metrics`: parses the Prometheus text format and lints it."""
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


OPENMETRICS_CHECK = """
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(sys.stdin.read()))
print(len(families))
"""


def openmetrics_check(text: str) -> subprocess.CompletedProcess:
    """prometheus_client's OpenMetrics parser (Debian's python3-prometheus-client),
    which refuses text that breaks the OpenMetrics 1.0 grammar; stdout: the families' count."""
    return subprocess.run(["/usr/bin/python3", "-c", OPENMETRICS_CHECK], input=text, capture_output=True,
                          text=True, timeout=30)


def samples(text: str) -> dict:
    """{'name{labels}': value} of every sample line."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values
