"""A fleet host whose clock is ten minutes ahead (faketime): expiry times go
to the shared store in the database's time, so neither that host nor the
others take a valid token for expired or an expired one for valid."""
import os
import time

from conftest import AuthServer, login, wait_for
from fleet import Fleet, Postgres, descendants


def test_a_host_ten_minutes_ahead_reads_and_writes_expiry_in_the_databases_time(workdir):
    server = AuthServer(os.path.join(workdir, "as"), access_ttl=300)
    pg = Postgres(os.path.join(workdir, "pg"))
    fleet = Fleet(workdir, server, pg, hosts=("a", "b"))
    try:
        fleet["a"].start()
        login(fleet["a"], server)
        generation = fleet.status("a")["generation"]
        fleet["b"].start(prefix=("faketime", "-f", "+600s"), env=dict(os.environ, FAKETIME_DONT_FAKE_MONOTONIC="1"))
        assert descendants(fleet["b"].process.pid), "B's tokend runs under faketime"
        fleet.wait_generation(generation, hosts="b")
        before = len(server.grants("refresh_token"))
        # By B's clock A's token was issued ten minutes ago; in the database's time it has five minutes left.
        token = fleet["b"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]
        assert token["generation"] == generation and len(server.grants("refresh_token")) == before, \
            "B took A's valid token for expired and refreshed it"
        # B refreshes and writes the expiry: A reads it in its own time, the server's five minutes.
        reply = fleet["b"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
        assert reply["parameters"]["token"]["generation"] == generation + 1, reply
        fleet.wait_generation(generation + 1, hosts="a")
        left = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["expiresAt"] - time.time()
        assert 250 < left < 310, f"A serves B's token as valid for {left:.0f} s; the server issued it for 300 s"
        offset = fleet.status("b")["fleet"].get("clockOffset")
        assert offset is not None and -605 < offset < -595, f"B measured the database {offset} s ahead"
        assert "clock differs from the database's" in fleet["b"].logs()
        print(f"B 600 s ahead: offset measured {offset:.2f} s; A serves B's token as valid for {left:.0f} s of 300")
    finally:
        fleet.stop()
        pg.stop("immediate")
        server.stop()
