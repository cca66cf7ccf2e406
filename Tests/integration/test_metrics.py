"""Metrics (issue 31): a real Prometheus scraping tokend's metrics-listen, a
real node_exporter reading its metrics-textfile, promtool and a strict
OpenMetrics parser on every form, and the listener's refusal of web pages."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import BIN, ROOT, AuthServer, free_port, login, open_to_other_users, read_frame, wait_for
from prometheus import NodeExporter, Prometheus, get, openmetrics_check, promtool_check, samples


@pytest.fixture(scope="module")
def server():
    """One authorization server for the module: its start is most of each test's time."""
    directory = tempfile.mkdtemp(prefix="tkms", dir="/tmp")
    instance = AuthServer(os.path.join(directory, "as"))
    yield instance
    instance.stop()
    shutil.rmtree(directory, ignore_errors=True)


def metrics_tokend(make_tokend, server, workdir):
    """A logged-in tokend with metrics-listen on a free port and a textfile in a directory of its own."""
    port = free_port()
    textfiles = os.path.join(workdir, "textfiles")
    os.makedirs(textfiles)
    daemon = make_tokend(server, daemon={
        "metrics-listen": f'"127.0.0.1:{port}"', "metrics-textfile": f'"{textfiles}/tokend.prom"'})
    daemon.start()
    login(daemon, server)
    daemon.metrics_port = port
    daemon.textfiles = textfiles
    return daemon


def stampede(path, generation, count=100):
    """`count` connections, all connected first, then Refresh(staleGeneration) sent at once:
    what a pool of workers does when the token they share was refused."""
    sockets = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        sockets.append(s)
    barrier = threading.Barrier(count)
    replies = [None] * count
    call = json.dumps({"method": "io.tokend.Broker.Refresh", "parameters": {"staleGeneration": generation}}).encode()

    def ask(index):
        barrier.wait()
        sockets[index].sendall(call + b"\0")
        replies[index] = json.loads(read_frame(sockets[index]))
        sockets[index].close()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return replies


def test_prometheus_sees_a_stampede_of_100_as_one_refresh_and_99_coalesced(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    node = NodeExporter(daemon.textfiles, workdir)
    prometheus = Prometheus(workdir, {"tokend": f"127.0.0.1:{daemon.metrics_port}",
                                      "node": f"127.0.0.1:{node.port}"})
    try:
        refreshes = 'tokend_session_refreshes_total{job="%s",session="default"}'
        coalesced = 'tokend_session_coalesced_total{job="%s",session="default"}'
        # Before: Prometheus has scraped tokend (OpenMetrics) and node_exporter (the textfile).
        before = wait_for(lambda: prometheus.value(refreshes % "tokend"), 30, "a first scrape of tokend")
        wait_for(lambda: prometheus.value(refreshes % "node") == before, 30, "the textfile through node_exporter")
        base = prometheus.value(coalesced % "tokend")
        grants = len(server.grants("refresh_token"))
        generation = daemon.call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]

        replies = stampede(daemon.socket, generation)

        assert all(r["parameters"]["token"]["generation"] == generation + 1 for r in replies), replies[:3]
        assert len(server.grants("refresh_token")) == grants + 1  # what the provider saw
        for job in ("tokend", "node"):
            wait_for(lambda: prometheus.value(refreshes % job) == before + 1
                     and prometheus.value(coalesced % job) == base + 99, 30, f"the stampede in {job}'s series")
        # The refresh as a rate an operator graphs, and the provider's answers by endpoint and status.
        assert prometheus.value(f'increase({refreshes % "tokend"}[1m])') > 0
        assert prometheus.value('tokend_provider_responses_total{job="tokend",endpoint="token",code="200"}') >= 2
        assert prometheus.value('tokend_session_authenticated{job="tokend",session="default"}') == 1
        assert all(t["health"] == "up" for t in prometheus.targets()), prometheus.targets()
    finally:
        prometheus.stop()
        node.stop()


def test_every_form_passes_promtool_or_the_openmetrics_parser(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    daemon.call("io.tokend.Broker.GetToken")
    url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
    textfile = os.path.join(daemon.textfiles, "tokend.prom")
    wait_for(lambda: os.path.exists(textfile), 10, "the metrics textfile")

    result = daemon.ctl("metrics")
    assert result.returncode == 0 and result.stdout.endswith("# EOF\n"), result
    status, content_type, openmetrics = get(url, {"Accept": "application/openmetrics-text;version=1.0.0,*/*;q=0.1"})
    assert status == 200 and content_type.startswith("application/openmetrics-text; version=1.0.0")
    for text in (result.stdout, openmetrics):
        check = openmetrics_check(text)
        assert check.returncode == 0 and int(check.stdout) > 20, check.stderr
        assert "# TYPE tokend_varlink_calls counter" in text and "# UNIT tokend_state_write_duration_seconds seconds" in text

    status, content_type, plain = get(url)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    with open(textfile) as f:
        file_text = f.read()
    assert oct(os.stat(textfile).st_mode & 0o777) == "0o644"
    for text in (plain, file_text):
        check = promtool_check(text)
        assert check.returncode == 0 and check.stdout + check.stderr == "", check
        assert "# TYPE tokend_varlink_calls_total counter" in text

    # One registry: the forms carry the same series (values move between reads).
    assert set(samples(plain)) == set(samples(openmetrics)) == set(samples(result.stdout))
    calls = samples(plain)['tokend_varlink_calls_total{method="io.tokend.Broker.GetToken",result="ok"}']
    assert calls >= 1


def test_every_exported_metric_is_in_tokend_8(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    text = daemon.ctl("metrics").stdout
    names = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    with open(os.path.join(ROOT, "man", "tokend.8")) as f:
        manual = f.read().replace("\\_", "_").replace("\\-", "-")
    exported = [name + "_total" if kind == "counter" else name for name, kind in names]
    assert len(exported) > 20
    assert [name for name in exported if name not in manual] == []


def test_the_metrics_listener_answers_programs_and_refuses_web_pages(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    url = f"http://127.0.0.1:{daemon.metrics_port}"
    assert get(url + "/metrics")[0] == 200
    assert get(url + "/metrics", {"Host": f"localhost:{daemon.metrics_port}"})[0] == 200
    # A page whose name was rebound to 127.0.0.1 sends its own name as Host.
    assert get(url + "/metrics", {"Host": f"attacker.example:{daemon.metrics_port}"})[0] == 421
    assert get(url + "/metrics", {"Host": f"127.0.0.1:{daemon.metrics_port + 1}"})[0] == 421
    # What browsers add to a page's requests.
    assert get(url + "/metrics", {"Origin": "http://attacker.example"})[0] == 403
    assert get(url + "/metrics", {"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert get(url + "/metrics", {"Sec-Fetch-Site": "same-site"})[0] == 403
    # A person typing the address into the browser's bar.
    assert get(url + "/metrics", {"Sec-Fetch-Site": "none"})[0] == 200
    assert get(url + "/other")[0] == 404
    with socket.create_connection(("127.0.0.1", daemon.metrics_port)) as s:
        s.sendall(f"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1:{daemon.metrics_port}\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.1 405")
    # A head that never ends, and garbage: the listener answers and goes on.
    with socket.create_connection(("127.0.0.1", daemon.metrics_port)) as s:
        s.sendall(b"NOT HTTP\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", daemon.metrics_port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000)
        assert s.recv(100).startswith(b"HTTP/1.1 431")
    time.sleep(1.1)  # the listener's rendering is made again at most once a second
    text = get(url + "/metrics")[2]
    counts = samples(text)
    assert counts['tokend_metrics_http_requests_total{code="421"}'] == 2
    assert counts['tokend_metrics_http_requests_total{code="403"}'] == 3
    # The Varlink socket is served all along by the same loop.
    assert daemon.call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"] >= 1


def test_idle_connections_holding_every_slot_do_not_keep_a_scraper_out(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    url = f"http://127.0.0.1:{daemon.metrics_port}"
    # Any local process may open them: 16 is the listener's table, one more shows it full.
    holders = [socket.create_connection(("127.0.0.1", daemon.metrics_port)) for _ in range(17)]
    try:
        for holder in holders:
            holder.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head that never ends
        status, _, text = get(url + "/metrics")
        assert status == 200
        closed = 0
        for holder in holders:
            holder.settimeout(5)
            try:
                closed += holder.recv(100) == b""
            except (ConnectionResetError, socket.timeout):
                closed += 1
        assert closed == 17, "each holder was evicted or timed out (its head is never whole)"
    finally:
        for holder in holders:
            holder.close()
    counts = samples(daemon.ctl("metrics").stdout)
    assert counts["tokend_metrics_http_evicted_total"] >= 2, "the 17th holder and the scraper each evicted one"


def test_a_metrics_address_another_program_holds_stops_tokend_naming_it(server, make_tokend, workdir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = make_tokend(server, daemon={"metrics-listen": f'"127.0.0.1:{port}"'})
        run = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config],
                             capture_output=True, text=True, timeout=30)
    said = run.stdout + run.stderr
    assert run.returncode != 0 and f"127.0.0.1:{port}" in said and "in use" in said, said


def test_fleet_hosts_count_their_lock_waits_and_the_shared_refresh(server, workdir):
    """Two hosts sharing a session through a real PostgreSQL: both stampede at once;
    each takes the fleet lock (its wait is measured), one refresh reaches the provider."""
    from fleet import Fleet, Postgres
    pg = Postgres(os.path.join(workdir, "pg"))
    fleet = Fleet(workdir, server, pg, hosts=("a", "b"))
    try:
        fleet.start()
        login(fleet["a"], server)
        generation = fleet.status("a")["generation"]
        fleet.wait_generation(generation)
        grants = len(server.grants("refresh_token"))
        threads = [threading.Thread(target=stampede, args=(fleet[name].socket, generation, 50)) for name in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        fleet.wait_generation(generation + 1)
        assert len(server.grants("refresh_token")) == grants + 1
        for name in "ab":
            counts = samples(fleet[name].ctl("metrics").stdout)
            assert counts['tokend_fleet_lock_wait_seconds_count{session="default"}'] >= 1, name
            assert counts['tokend_fleet_lock_losses_total{session="default"}'] == 0
    finally:
        fleet.stop()
        pg.stop("immediate")


def test_connections_subscribers_and_refused_peers_are_counted(server, make_tokend, workdir):
    port = free_port()
    daemon = open_to_other_users(make_tokend, server, workdir, 'read-users = ["root"]\nread-groups = []',
                                 **{"metrics-listen": f'"[::1]:{port}"'})
    url = f"http://[::1]:{port}/metrics"

    def counts():
        return samples(get(url)[2])

    with socket.socket(socket.AF_UNIX) as subscriber:
        subscriber.connect(daemon.socket)
        subscriber.sendall(json.dumps({"method": "io.tokend.Broker.Subscribe", "parameters": {}, "more": True}).encode() + b"\0")
        assert json.loads(read_frame(subscriber))["parameters"]["event"] == "status"
        wait_for(lambda: counts()["tokend_subscribers"] == 1, 10, "the subscriber counted")
        assert counts()["tokend_connections"] >= 1
    wait_for(lambda: counts()["tokend_subscribers"] == 0 and counts()["tokend_connections"] == 0, 10, "both gone")
    # A user the policy allows nothing (uid 65534) is refused at accept, and counted by reason: one connection,
    # one call (tokenctl would ask a second time, for its own access, to explain the refusal).
    one_call = ("import json, socket, sys\n"
                "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                "s.sendall(json.dumps({'method': 'io.tokend.Broker.GetStatus', 'parameters': {}}).encode() + b'\\0')\n"
                "print(s.recv(65536).rstrip(b'\\0').decode())\n")
    nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             sys.executable, "-c", one_call, daemon.socket],
                            capture_output=True, text=True, timeout=30)
    assert json.loads(nobody.stdout)["error"] == "org.varlink.service.PermissionDenied", (nobody.stdout, nobody.stderr)
    # The listener renders at most once a second: the refusal shows within that.
    wait_for(lambda: counts()['tokend_connections_refused_total{reason="permission"}'] == 1, 5, "the refusal counted")
    assert counts()['tokend_varlink_calls_total{method="io.tokend.Broker.Subscribe",result="ok"}'] == 1


def test_cookie_changes_are_counted_by_kind(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    def counts() -> dict:
        text = samples(daemon.ctl("metrics").stdout)
        return {kind: text.get(f'tokend_session_cookie_changes_total{{session="default",kind="{kind}"}}', 0)
                for kind in ("set", "delete")}
    before = counts()
    reply = daemon.call("io.tokend.Broker.ImportCookies", url="https://app.example.com/",
                        setCookie=["a=1", "b=2"])[1]["parameters"]
    assert reply["applied"] == 2
    assert daemon.call("io.tokend.Broker.DeleteCookies", url="https://app.example.com/", name="a")[1][
        "parameters"]["deleted"] == 1
    after = counts()
    assert after["set"] - before["set"] == 2 and after["delete"] - before["delete"] == 1, (before, after)


def test_a_reload_that_remakes_a_session_never_lowers_its_counters(server, make_tokend, workdir):
    daemon = metrics_tokend(make_tokend, server, workdir)
    refreshes = 'tokend_session_refreshes_total{session="default"}'
    for _ in range(2):
        generation = json.loads(daemon.ctl("status", "--json").stdout)["generation"]
        assert daemon.ctl("refresh", "--stale-generation", str(generation)).returncode == 0
    wait_for(lambda: samples(daemon.ctl("metrics").stdout)[refreshes] >= 2, 5, "the refreshes gathered")
    counted = samples(daemon.ctl("metrics").stdout)[refreshes]
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace("refresh-margin = 5", "refresh-margin = 6"))
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 10, "reload")
    # The session was made anew: its own count starts again.
    assert json.loads(daemon.ctl("status", "--json").stdout)["refreshes"] < counted
    time.sleep(2.5)  # the status is gathered into the metrics every second
    assert samples(daemon.ctl("metrics").stdout)[refreshes] >= counted
