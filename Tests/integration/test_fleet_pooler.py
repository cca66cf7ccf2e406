# Over 90 s of `make test` on the busy 2-core machine (177 to 190 s summed there, load 15):
# real token lifetimes with a caller on each of 8 hosts, and a killed lease holder's lease (14 s) waited out.
"""A fleet through PgBouncer 1.18 in transaction mode (a pool of 5 server
connections in front of a PostgreSQL 15 that allows 20): every fleet
statement is autocommit or a short transaction, nothing session-scoped."""
import os
import re
import shutil
import tempfile
import threading
import time

import pytest

from conftest import AuthServer, login, wait_for
from fleet import Fleet, PgBouncer, Postgres


@pytest.fixture(scope="module")
def servers():
    """One PostgreSQL and one PgBouncer for the file's tests on a worker (initdb takes seconds); each test
    starts on an empty database (`pg`)."""
    directory = tempfile.mkdtemp(prefix="tkfleetdb", dir="/tmp")  # postgres must pass through to it
    os.chmod(directory, 0o711)
    pg = Postgres(os.path.join(directory, "pg"), settings=("max_connections=20",))
    bouncer = PgBouncer(os.path.join(directory, "pgbouncer"), pg, pool=5)
    yield pg, bouncer
    bouncer.stop()
    pg.stop("immediate")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg(servers):
    pg = servers[0]
    pg.sql("DROP VIEW IF EXISTS tokend_sessions; DROP TABLE IF EXISTS tokend_shared, tokend_sessions, tokend_schema; "
           "DROP FUNCTION IF EXISTS tokend_refuse_lock_protocol()", database="tokend")
    return pg


@pytest.fixture
def bouncer(servers, pg):
    return servers[1]


def test_three_hosts_share_a_session_through_pgbouncer_and_hold_no_connection_while_idle(server, workdir, pg, bouncer):
    # poll=5: longer than the 2 s a host keeps its connection after its last statement.
    fleet = Fleet(workdir, server, bouncer, **{"shared-store": f'"{bouncer.url(options="poll=5")}"'})
    try:
        fleet.start()
        login(fleet["a"], server)
        generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation, timeout=30)
        tokens = {fleet[name].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["accessToken"]
                  for name in "abc"}
        assert len(tokens) == 1, "every host serves the session A logged in"
        assert all(fleet.status(name)["store"] == "connected" for name in "abc")
        stats = next(r for r in bouncer.show("STATS") if r["database"] == "tokend")
        assert int(stats["total_xact_count"]) > 0, "the hosts' statements went through PgBouncer"
        log = bouncer.log()
        assert "unsupported startup parameter" not in log, log[-2000:]
        # Between polls no host has a connection open to the pooler, and the database has at most the pool's.
        wait_for(lambda: not [c for c in bouncer.show("CLIENTS") if c["application_name"].startswith("tokend")],
                 20, "every host's connection closed while idle")
        assert pg.backends() <= 5
        assert "pg_advisory_lock" not in pg.sql("SELECT string_agg(query, ' ') FROM pg_stat_activity")
        # Status, tokenctl status and the metrics show the store as A sees it (tokend(8), tokenctl(1)).
        store = fleet.status("a")["fleet"]
        assert store["following"] == "polling" and store["pollInterval"] == 5, store
        assert store["statements"] > 0 and store["connects"] > 0 and store["lastRoundTrip"] > 0, store
        assert store["copyAge"] >= 0, store
        text = fleet["a"].ctl("status").stdout
        assert "\n  fleet host a: learns of other hosts' writes by a read every 5 s; its copy read " in text, text
        assert re.search(r"^  lease (free when last read|held by \w+ \(epoch \d+\), \d+ s left( when last read)?); "
                         r"\d+ statements to the store, last round trip [\d.]+ ms, \d+ connections opened$", text, re.M), text
        metrics = fleet["a"].call("io.tokend.Broker.GetMetrics")[1]["parameters"]["text"]
        assert re.search(r'^tokend_fleet_store_round_trip_seconds_count\{session="default"\} [1-9]', metrics, re.M)
        assert re.search(r'^tokend_fleet_following\{session="default",mode="polling"\} 1', metrics, re.M), metrics
        assert re.search(r'^tokend_fleet_copy_age_seconds\{session="default"\} \d', metrics, re.M), metrics
    finally:
        fleet.stop()


def test_stale_hosts_asked_to_refresh_read_the_store_take_no_lease_and_call_no_one(server, workdir, pg, bouncer):
    # B, C and D poll once an hour: only their compare-and-refresh can tell them of A's refresh.
    fleet = Fleet(workdir, server, bouncer, hosts=("a", "b", "c", "d"),
                  **{"shared-store": f'"{bouncer.url(options="poll=3600")}"'})
    try:
        fleet["a"].start()
        login(fleet["a"], server)
        generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        for name in "bcd":
            fleet[name].start()
        fleet.wait_generation(generation, hosts="bcd")
        newer = fleet["a"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]["parameters"]["token"]
        assert newer["generation"] == generation + 1
        epoch = pg.sql("SELECT lease_epoch FROM tokend_shared", database="tokend")
        grants = len(server.grants("refresh_token"))
        for name in "bcd":
            assert fleet.status(name)["generation"] == generation, f"{name} has not polled since: its copy is stale"
            reply = fleet[name].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
            assert "error" not in reply, reply
            assert reply["parameters"]["token"]["accessToken"] == newer["accessToken"]
        assert len(server.grants("refresh_token")) == grants
        assert all(fleet.status(name)["refreshes"] == 0 for name in "bcd")
        after = pg.sql("SELECT lease_epoch FROM tokend_shared", database="tokend")
        print(f"3 stale hosts answered with generation {generation + 1}: lease epoch {epoch} before, {after} after")
        assert after == epoch, "a stale host took the lease to learn what one read tells"
    finally:
        fleet.stop()


def test_a_lease_holder_killed_in_a_slow_refresh_is_replaced_once_its_lease_expires(workdir, pg, bouncer):
    from faultproxy import FaultProxy
    # No grace period: C's request never reaches the server (the proxy hangs), so the stored token still works.
    server = AuthServer(os.path.join(workdir, "as"))
    proxy = FaultProxy(server.base)
    c_server = type("S", (), {"token_url": proxy.url + "/o/token/", "base": proxy.url})()
    # upstream-timeout 9 s: the lease lasts 14 s, renewed every 4.7 s while held.
    fleet = Fleet(workdir, server, bouncer, servers={"c": c_server},
                  **{"shared-store": f'"{bouncer.url()}"', "upstream-timeout": 9})
    try:
        fleet.start()
        login(fleet["a"], server)
        generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation)
        proxy.mode = "hang"
        threading.Thread(target=lambda: call_quietly(fleet["c"], "io.tokend.Broker.Refresh", staleGeneration=generation),
                         daemon=True).start()
        wait_for(lambda: proxy.calls("hang"), 20, "C's refresh sent upstream")
        lease = lambda: pg.sql("SELECT lease_holder, lease_epoch, lease_expires FROM tokend_shared", database="tokend")
        taken = lease()
        assert taken.startswith("c|"), taken
        # While C's upstream call hangs, C renews its lease (the same epoch, a later expiry).
        wait_for(lambda: lease() != taken, 15, "C renewing its lease")
        assert lease().split("|")[:2] == taken.split("|")[:2]
        # C's status says it holds the lease (the database's epoch, time left); A sees C's lease at a poll.
        epoch = int(taken.split("|")[1])
        held = fleet.status("c")["fleet"]["lease"]
        assert held["holder"] == "c" and held["heldHere"] and held["epoch"] == epoch and 0 < held["remaining"] <= 14, held
        wait_for(lambda: (fleet.status("a")["fleet"].get("lease") or {}).get("holder") == "c", 10, "A seeing C's lease")
        assert fleet.status("a")["fleet"]["lease"]["heldHere"] is False
        text = fleet["a"].ctl("status").stdout
        assert re.search(rf"lease held by c \(epoch {epoch}\), \d+ s left when last read", text), text
        metrics = lambda host: fleet[host].call("io.tokend.Broker.GetMetrics")[1]["parameters"]["text"]
        wait_for(lambda: 'tokend_fleet_lease_held{session="default"} 1' in metrics("c"), 10, "C's lease in its metrics")
        assert 'tokend_fleet_lease_held{session="default"} 0' in metrics("a")
        fleet["c"].process.kill()
        killed = time.time()
        fleet.wait_generation(generation + 1, timeout=40, hosts="ab")
        took = time.time() - killed
        tokens = {fleet[name].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["accessToken"] for name in "ab"}
        assert len(tokens) == 1
        grants = server.grants("refresh_token")
        assert all(g["status"] == 200 and not g["reuse"] for g in grants), grants
        assert took < 14 + 5, f"the others took over {took:.1f} s after the kill (lease 14 s)"
        print(f"lease holder killed in a slow refresh: taken over {took:.1f} s later (lease 14 s)")
    finally:
        fleet.stop()
        proxy.stop()
        server.stop()


def call_quietly(host, method, **parameters):
    try:
        host.call(method, **parameters)
    except (ConnectionError, OSError):
        pass  # the host is killed before it answers


def run_fleet_through_the_pooler(workdir, pg, bouncer, hosts, lifetimes):
    """`hosts` tokend hosts through `bouncer`, a caller on each asking for the token back to back, over
    `lifetimes` token lifetimes (tokens live 6 s and are refreshed 2 s before expiry). Returns its figures."""
    server = AuthServer(os.path.join(workdir, "as"), access_ttl=6)
    names = [f"h{i}" for i in range(hosts)]
    fleet = Fleet(workdir, server, bouncer, hosts=names,
                  **{"shared-store": f'"{bouncer.url(options="poll=2")}"', "refresh-margin": 2, "min-valid": 1})
    stop, lock = threading.Event(), threading.Lock()
    seen = {"calls": 0, "errors": [], "backends": 0, "per_host": 0}

    def caller(host):
        while not stop.is_set():
            reply = host.call("io.tokend.Broker.GetToken")[1]
            with lock:
                seen["calls"] += 1
                if "error" in reply:
                    seen["errors"].append(reply)
            time.sleep(0.05)  # pacing: 2 cores for the whole fleet, the database and the pooler

    def sampler():
        # Sampled, not awaited: what the database and the pooler hold while the fleet works.
        while not stop.is_set():
            clients = [c["application_name"] for c in bouncer.show("CLIENTS") if c["application_name"].startswith("tokend")]
            with lock:
                seen["backends"] = max(seen["backends"], pg.backends())
                seen["per_host"] = max([seen["per_host"]] + [clients.count(n) for n in set(clients)])
            time.sleep(0.2)

    try:
        fleet.start()
        login(fleet[names[0]], server)
        start = fleet[names[0]].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(start, timeout=60)
        before = len(server.grants("refresh_token"))
        queries_before = int(next(r for r in bouncer.show("STATS") if r["database"] == "tokend")["total_query_count"])
        began = time.time()
        threads = [threading.Thread(target=caller, args=(fleet[n],)) for n in names] + [threading.Thread(target=sampler)]
        for t in threads:
            t.start()
        fleet.wait_generation(start + lifetimes, timeout=10 * lifetimes + 20, hosts=[names[0]])
        stop.set()
        for t in threads:
            t.join(60)
        took = time.time() - began
        queries = int(next(r for r in bouncer.show("STATS") if r["database"] == "tokend")["total_query_count"])
        generation = max(fleet.status(n)["generation"] for n in names)
        grants = server.grants("refresh_token")[before:]
        assert all(g["status"] == 200 and not g["reuse"] for g in grants), [g for g in grants if g["status"] != 200][:3]
        assert len(grants) == generation - start, f"{len(grants)} upstream refreshes for {generation - start} lifetimes"
        assert not seen["errors"], seen["errors"][:3]
        assert seen["backends"] <= 5, f"{seen['backends']} backends for a pool of 5"
        assert seen["per_host"] <= 1, f"a host had {seen['per_host']} connections to the pooler at once"
        return {"refreshes": len(grants), "lifetimes": generation - start, "calls": seen["calls"],
                "backends": seen["backends"], "per_host": seen["per_host"],
                "statements_per_host_minute": (queries - queries_before) / hosts / took * 60, "seconds": took}
    finally:
        stop.set()
        fleet.stop()
        server.stop()


def test_eight_hosts_through_a_pool_of_five_refresh_once_per_lifetime(workdir, pg, bouncer):
    figures = run_fleet_through_the_pooler(workdir, pg, bouncer, hosts=8, lifetimes=3)
    print(f"8 hosts through PgBouncer (pool 5): {figures}")


@pytest.mark.long("fifty tokend hosts started one by one and five token lifetimes: minutes on 2 cores")
def test_fifty_hosts_through_a_pool_of_five_refresh_once_per_lifetime(workdir, pg, bouncer):
    figures = run_fleet_through_the_pooler(workdir, pg, bouncer, hosts=50, lifetimes=5)
    print(f"50 hosts through PgBouncer (pool 5): {figures}")


def test_listen_works_on_a_direct_connection_and_is_found_not_to_behind_the_pooler(server, workdir, pg, bouncer):
    # Both poll once an hour: what they learn sooner, they learn by notification.
    fleet = Fleet(workdir, server, pg, hosts=("a", "b"))
    for name, url in (("a", pg.url(options="poll=3600&listen=on")), ("b", bouncer.url(options="poll=3600&listen=on"))):
        with open(fleet[name].config) as f:
            config = f.read()
        with open(fleet[name].config, "w") as f:
            f.write(config.replace(f'"{pg.url()}"', f'"{url}"'))
    try:
        fleet.start()
        wait_for(lambda: "following the fleet by notifications" in fleet["a"].logs(), 20, "A's probe notification")
        wait_for(lambda: "LISTEN gets no notifications" in fleet["b"].logs(), 20, "B finding LISTEN deaf")
        assert "following the fleet by notifications" not in fleet["b"].logs()
        # Status says so too: A listens, B fell back to polling.
        assert fleet.status("a")["fleet"]["following"] == "listening"
        assert fleet.status("b")["fleet"]["following"] == "notificationsLost"
        assert "only: listen=on, but no notification arrives" in fleet["b"].ctl("status").stdout
        # B's login reaches A by notification (A's next poll is an hour away).
        login(fleet["b"], server)
        generation = fleet["b"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation, hosts="a")
    finally:
        fleet.stop()


def test_logout_on_one_host_reaches_every_host_within_the_poll_interval(server, workdir, pg, bouncer):
    # The claim: no LISTEN through the pooler, yet a logout reaches every host within one poll
    # interval (plus its 10 % jitter and a second for the read itself), measured from the logout's answer.
    poll = 3
    names = ("a", "b", "c", "d")
    fleet = Fleet(workdir, server, bouncer, hosts=names, **{"shared-store": f'"{bouncer.url(options=f"poll={poll}")}"'})
    try:
        fleet.start()
        login(fleet["a"], server)
        generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation, timeout=30)
        reply = fleet["a"].call("io.tokend.Broker.Logout", revoke=False)[1]
        answered = time.monotonic()
        assert "error" not in reply, reply
        seen = {}

        def every_host_logged_out():
            for name in names[1:]:
                if name not in seen and fleet.status(name)["state"] == "loggedOut":
                    seen[name] = time.monotonic() - answered
            return len(seen) == len(names) - 1

        wait_for(every_host_logged_out, 30, "every other host logged out")
        assert max(seen.values()) <= poll * 1.1 + 1, seen
    finally:
        fleet.stop()


def test_doctor_tells_a_session_mode_pooler_from_a_transaction_mode_one(server, workdir, pg, bouncer, servers):
    # Two hosts of one fleet: A through the file's PgBouncer in transaction mode, B through a second PgBouncer in
    # session mode in front of the same PostgreSQL. Each tokend probes with two client connections at once
    # (status's fleet.check.pooler); doctor warns of session mode only, naming the pool_mode that fixes it.
    session_mode = PgBouncer(os.path.join(os.path.dirname(bouncer.directory), "pgbouncer-session"), servers[0],
                             pool=5, mode="session")
    fleet = Fleet(workdir, server, bouncer, hosts=("a", "b"),
                  **{"shared-store": f'"{bouncer.url(options="poll=5")}"'})
    try:
        with open(fleet["b"].config) as f:
            config = f.read()
        with open(fleet["b"].config, "w") as f:
            f.write(config.replace(f":{bouncer.port}/", f":{session_mode.port}/"))
        fleet.start()
        login(fleet["a"], server)
        checked = lambda name: fleet.status(name)["fleet"].get("check")
        wait_for(lambda: checked("a") and checked("b"), 30, "both hosts' look at the store")
        assert checked("a")["pooler"] == "transaction", checked("a")
        assert checked("b")["pooler"] == "session", checked("b")
        stats = next(r for r in session_mode.show("STATS") if r["database"] == "tokend")
        assert int(stats["total_xact_count"]) > 0, "B's statements went through the session-mode PgBouncer"
        said_a = fleet["a"].ctl("doctor", "--config", fleet["a"].config).stdout
        assert "a pooler in transaction mode" in said_a and "session mode" not in said_a, said_a
        said_b = fleet["b"].ctl("doctor", "--config", fleet["b"].config).stdout
        assert "a pooler in session mode: each host pins one server connection" in said_b, said_b
        assert "pool_mode = transaction" in said_b, said_b
    finally:
        fleet.stop()
        session_mode.stop()
