"""A fleet through PgBouncer 1.18 in transaction mode (a pool of 5 server
connections in front of a PostgreSQL 15 that allows 20): every fleet
statement is autocommit or a short transaction, nothing session-scoped."""
import os

import pytest

from conftest import login, wait_for
from fleet import Fleet, PgBouncer, Postgres


@pytest.fixture
def pg(workdir):
    instance = Postgres(os.path.join(workdir, "pg"), settings=("max_connections=20",))
    yield instance
    instance.stop("immediate")


@pytest.fixture
def bouncer(workdir, pg):
    instance = PgBouncer(os.path.join(workdir, "pgbouncer"), pg, pool=5)
    yield instance
    instance.stop()


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
    finally:
        fleet.stop()
