"""A session shared by three hosts through a real PostgreSQL, against the real
authorization server (rotation and reuse protection on)."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import AuthServer, login, read_frame, wait_for
from fleet import Fleet, Postgres


@pytest.fixture
def pg(workdir):
    instance = Postgres(os.path.join(workdir, "pg"))
    yield instance
    instance.stop("immediate")


@pytest.fixture
def fleet_of(workdir, pg):
    made = []

    def make(server, **session):
        fleet = Fleet(workdir, server, pg, **session)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.stop()


def token_burst(paths_and_counts):
    """Connect every caller first, then all send GetToken at once."""
    sockets = []
    for path, count in paths_and_counts:
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            sockets.append(s)
    barrier = threading.Barrier(len(sockets))
    results = [None] * len(sockets)

    def ask(index):
        s = sockets[index]
        barrier.wait()
        s.sendall(b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0')
        results[index] = json.loads(read_frame(s))
        s.close()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(sockets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


class Events:
    """A Subscribe stream read in the background."""

    def __init__(self, path):
        self.events = []
        self.socket = socket.socket(socket.AF_UNIX)
        self.socket.connect(path)
        self.socket.sendall(json.dumps({"method": "io.tokend.Broker.Subscribe", "parameters": {},
                                        "more": True}).encode() + b"\0")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                self.events.append(json.loads(read_frame(self.socket))["parameters"])
        except (OSError, ConnectionError, ValueError):
            pass

    def kinds(self):
        return [e.get("event") for e in self.events]


def test_login_on_one_host_serves_all_and_logout_on_another_ends_it_everywhere(server, fleet_of, pg):
    fleet = fleet_of(server).start()
    watchers = {name: Events(fleet[name].socket) for name in "ac"}
    login(fleet["a"], server)
    status = fleet.status("a")
    assert status["store"] == "connected" and status["hostId"] == "a"
    fleet.wait_generation(status["generation"], hosts="bc")
    tokens = {name: fleet[name].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"] for name in "abc"}
    assert len({t["accessToken"] for t in tokens.values()}) == 1, "every host serves the session A logged in"
    assert len(server.grants("refresh_token")) == 1, "one refresh (A's check of the new grant), not one per host"
    assert pg.row().split("|")[2] == "a"
    wait_for(lambda: "loggedIn" in watchers["c"].kinds(), 10, "C's subscriber told of the login")

    raw, reply = fleet["b"].call("io.tokend.Broker.Logout", revoke=False)
    assert "error" not in reply, reply
    for name in "ac":
        wait_for(lambda: fleet.status(name)["state"] == "loggedOut", 10, f"host {name} logged out")
        reply = fleet[name].call("io.tokend.Broker.GetToken")[1]
        assert reply["error"] == "io.tokend.Broker.LoginRequired", reply
        wait_for(lambda: "loggedOut" in watchers[name].kinds(), 10, f"{name}'s subscriber told of the logout")
    # The database holds only sealed records: no token in plaintext.
    record = pg.sql("SELECT record FROM tokend_sessions", database="tokend")
    assert '"sealed"' in record and tokens["a"]["accessToken"] not in record


def test_three_hosts_300_callers_each_at_expiry_cause_one_refresh(fleet_of, workdir):
    server = AuthServer(os.path.join(workdir, "as"), access_ttl=12)
    try:
        fleet = fleet_of(server, **{"refresh-margin": 0, "min-valid": 4}).start()
        login(fleet["a"], server)
        status = fleet.status("a")
        fleet.wait_generation(status["generation"])
        wait_for(lambda: time.time() >= status["expiresAt"] - 3, 20, "token inside its min-valid window")
        before = len(server.grants("refresh_token"))
        results = token_burst([(fleet[name].socket, 300) for name in "abc"])
        grants = server.grants("refresh_token")[before:]
        assert all("error" not in r for r in results), [r for r in results if "error" in r][:1]
        tokens = {r["parameters"]["token"]["accessToken"] for r in results}
        assert len(grants) == 1, f"the server saw {len(grants)} refresh grants for one expiry of a 3-host fleet"
        assert grants[0]["status"] == 200
        assert len(tokens) == 1, "900 callers on 3 hosts got the same token"
        refreshed = {name: fleet.status(name)["refreshes"] for name in "abc"}
        assert sum(refreshed.values()) == 2, f"A's login check and one refresh for the fleet: {refreshed}"
        # The session survives: the next refresh works from any host.
        reply = fleet["c"].call("io.tokend.Broker.Refresh")[1]
        assert "error" not in reply, reply
        print(f"3 hosts x 300 callers at expiry: {len(grants)} refresh grant; upstream calls per host {refreshed}")
    finally:
        server.stop()
