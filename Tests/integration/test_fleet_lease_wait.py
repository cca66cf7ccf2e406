"""Hosts waiting for another host's lease: when its holder has written the
refresh and released, they find the new copy and take no lease of their own
(PostgresStore.takeLease looks before it takes, once it has seen the lease held)."""
import threading

from conftest import login, wait_for
from faultproxy import FaultProxy
from fleet import fleet_of, pg  # noqa: F401 (fixtures)


def test_hosts_waiting_on_a_held_lease_take_none_once_its_refresh_is_written(server, fleet_of, pg):
    # A's token endpoint holds the provider's answer until the test lets it through: A's lease stays held meanwhile.
    proxy = FaultProxy(server.base)
    gate = threading.Event()
    a_server = type("S", (), {"token_url": proxy.url + "/o/token/", "base": proxy.url})()
    # upstream-timeout 30 s: A's held answer is not given up while the others line up (the lease lasts 35 s).
    fleet = fleet_of(server, hosts=("a", "b", "c", "d", "e"), servers={"a": a_server}, **{"upstream-timeout": 30})
    waiters = "bcde"
    try:
        fleet.start()
        login(fleet["b"], server)
        generation = fleet["b"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
        fleet.wait_generation(generation)
        grants = len(server.grants("refresh_token"))
        proxy.rewrite = lambda answer: (gate.wait(60), answer)[1]
        answers = {}

        def refresh(name):
            answers[name] = fleet[name].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]

        threads = [threading.Thread(target=refresh, args=("a",), daemon=True)]
        threads[0].start()
        wait_for(lambda: proxy.calls("pass"), 20, "A's refresh sent upstream")
        held = pg.sql("SELECT lease_holder, lease_epoch FROM tokend_shared", database="tokend")
        assert held.startswith("a|"), held
        epoch = int(held.split("|")[1])
        # B to E are asked to refresh the same generation: the store has only A's marker, so each waits for A's lease.
        for name in waiters:
            threads.append(threading.Thread(target=refresh, args=(name,), daemon=True))
            threads[-1].start()

        def waiting(name):
            status = fleet.status(name)
            return status["state"] == "refreshing" and (status["fleet"].get("lease") or {}).get("holder") == "a"

        for name in waiters:
            wait_for(lambda: waiting(name), 20, f"{name} waiting for A's lease")
        assert not answers, answers
        gate.set()
        for thread in threads:
            thread.join(60)
        tokens = {answers[name]["parameters"]["token"]["accessToken"] for name in "a" + waiters}
        assert len(tokens) == 1, answers
        assert len(server.grants("refresh_token")) == grants + 1, "one refresh for five hosts"
        after = int(pg.sql("SELECT lease_epoch FROM tokend_shared", database="tokend"))
        print(f"4 hosts waited on A's lease (epoch {epoch}): {after - epoch} more leases taken after A's release")
        assert after == epoch, f"the waiters took {after - epoch} leases to learn what one look told"
    finally:
        gate.set()
        proxy.stop()
