"""What an idle fleet costs its database, for docs/fleet.md: N tokend hosts through PgBouncer 1.18
(transaction mode, a pool of 5) in front of PostgreSQL 15, at the default poll (10 s), for two minutes.

    .venv/bin/python Tests/integration/fleet_measure.py [HOSTS]      (as root: postgres runs as postgres)

Prints statements and transactions per host per minute (PgBouncer's SHOW STATS), the most hosts
connected to the pooler at once and the most PostgreSQL backends (sampled every 0.5 s)."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import AuthServer, login  # noqa: E402
from fleet import Fleet, PgBouncer, Postgres  # noqa: E402


def measure(hosts: int, seconds: float = 120) -> str:
    work = tempfile.mkdtemp(prefix="tkidle", dir="/tmp")
    os.chmod(work, 0o711)
    pg = Postgres(os.path.join(work, "pg"), settings=("max_connections=20",))
    bouncer = PgBouncer(os.path.join(work, "pgbouncer"), pg, pool=5)
    server = AuthServer(os.path.join(work, "as"))
    names = [f"h{i}" for i in range(hosts)]
    fleet = Fleet(work, server, bouncer, hosts=names, **{"shared-store": f'"{bouncer.url(options="")}"'})
    try:
        fleet.start()
        login(fleet[names[0]], server)
        generation = fleet[names[0]].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation, timeout=60)
        stats = lambda: next(r for r in bouncer.show("STATS") if r["database"] == "tokend")  # noqa: E731
        before, began = stats(), time.time()
        connected = backends = 0
        while time.time() - began < seconds:
            clients = [c for c in bouncer.show("CLIENTS") if c["application_name"].startswith("tokend")]
            connected, backends = max(connected, len(clients)), max(backends, pg.backends())
            time.sleep(0.5)
        after, minutes = stats(), (time.time() - began) / 60
        per_minute = lambda key: (int(after[key]) - int(before[key])) / hosts / minutes  # noqa: E731
        return (f"{hosts} idle hosts, poll 10 s, {minutes * 60:.0f} s: {per_minute('total_query_count'):.1f} statements "
                f"and {per_minute('total_xact_count'):.1f} transactions per host per minute; at most {connected} hosts "
                f"connected to the pooler at once, {backends} PostgreSQL backends")
    finally:
        fleet.stop()
        server.stop()
        bouncer.stop()
        pg.stop("immediate")


if __name__ == "__main__":
    print(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
