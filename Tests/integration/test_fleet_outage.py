"""PostgreSQL down for longer than the lease while its holder has the provider's
answer but cannot write it: the holder writes it when the database is back,
and no other host replays the spent refresh token."""
import http.server
import os
import threading
import time
import urllib.error
import urllib.request

from conftest import AuthServer, login, wait_for
from fleet import Fleet, Postgres

# A's refresh is held at the proxy while the test reads the lease and stops PostgreSQL (up to 2.5 s at load 22,
# after the forward to the server): A's upstream-timeout must outlast that, or A gives up before the answer.
UPSTREAM_TIMEOUT = 6
LEASE = UPSTREAM_TIMEOUT + 5  # docs/fleet.md: the lease is upstream-timeout + 5 s
RENEWAL = LEASE / 3  # renewed every third of the lease
DOWN = LEASE + RENEWAL + 1  # past the expiry of a lease renewed just before the database stopped


class DelayingProxy:
    """Forwards each POST at once, then holds its answer `delay` seconds (the
    server has rotated the token by then; the host does not know it yet)."""

    def __init__(self, upstream: str, delay: float) -> None:
        proxy = self
        self.forwarded = threading.Event()
        self.release = threading.Event()
        self.release.set()  # answers at once until `hold()`

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = urllib.request.Request(upstream + self.path, data=body, method="POST")
                for name in ("Authorization", "Content-Type"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=10) as reply:
                        status, payload = reply.status, reply.read()
                except urllib.error.HTTPError as error:
                    status, payload = error.code, error.read()
                proxy.forwarded.set()
                proxy.release.wait(delay)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def hold(self) -> None:
        self.forwarded.clear()
        self.release.clear()

    def stop(self) -> None:
        self.httpd.shutdown()


def test_database_down_longer_than_the_lease_after_the_answer_loses_nothing(workdir):
    server = AuthServer(os.path.join(workdir, "as"))  # rotation and reuse detection, no grace period
    pg = Postgres(os.path.join(workdir, "pg"))
    proxy = DelayingProxy(server.base, 30)
    a_server = type("S", (), {"token_url": proxy.url + "/o/token/", "base": server.base})()
    fleet = Fleet(workdir, server, pg, hosts=("a", "b"), servers={"a": a_server},
                  **{"upstream-timeout": UPSTREAM_TIMEOUT})
    stop = threading.Event()
    try:
        fleet.start()
        login(fleet["a"], server)
        generation = fleet.status("a")["generation"]
        fleet.wait_generation(generation)
        before = len(server.grants("refresh_token"))
        proxy.hold()
        answered: dict = {}
        refresh = threading.Thread(target=lambda: answered.update(
            a=fleet["a"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]))
        refresh.start()
        assert proxy.forwarded.wait(20), "A's refresh reached the server"
        # A renews every third of its lease: its expiry when the database stops is at most that later.
        holder, expires = pg.sql(f"SELECT lease_holder, lease_expires + interval '{RENEWAL} s' FROM tokend_shared",
                                 database="tokend").split("|")
        assert holder == "a"
        pg.stop("fast")
        down = time.monotonic()
        proxy.release.set()  # A has the rotated token now and cannot write it
        refresh.join(30)
        assert answered["a"].get("parameters", {}).get("token", {}).get("generation") == generation + 1, answered
        # B's callers hold the token A's refresh replaced and ask B to refresh it, all the while. They name
        # that generation, not B's current one: once B has A's newer generation, asking it to refresh that
        # one is a new forced refresh, and B's refreshes would move the row past the write this test waits for.
        replies: list = []

        def caller() -> None:
            while not stop.is_set():
                try:
                    replies.append(fleet["b"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1])
                except (ConnectionError, OSError) as error:
                    replies.append({"exception": str(error)})
                stop.wait(0.2)

        callers = threading.Thread(target=caller)
        callers.start()
        # Down for longer than the lease: by its expiry, A's lease has run out when the database is back.
        stop.wait(max(0.0, DOWN - (time.monotonic() - down)))
        pg.start()
        assert pg.sql(f"SELECT pg_postmaster_start_time() > '{expires}'") == "t", \
            "A's lease ran out while the database was down"
        # The event: the store's next generation. A retries its write every second and has one lease from
        # the database's start to make it (docs/fleet.md); after that B could take over and replay. 30 s is
        # time for a loaded machine to start PostgreSQL and run both; who wrote it is asserted, not waited for.
        def newer() -> list | None:
            row = pg.row().split("|")
            return row if len(row) == 3 and row[1].isdigit() and int(row[1]) > generation else None

        row = wait_for(newer, 30, f"a generation after {generation} in the store")
        assert row[1:] == [str(generation + 1), "a"], f"A's refreshed generation {generation + 1} written by A: {row}"
        fleet.wait_generation(generation + 1, hosts="b")
        stop.set()
        callers.join(20)
        grants = server.grants("refresh_token")[before:]
        assert len(grants) == 1 and grants[0]["status"] == 200 and not grants[0].get("reuse"), \
            f"A's refresh is the only one (a spent refresh token was replayed?): {grants}"
        for name in "ab":
            assert fleet.status(name)["state"] == "active", fleet.status(name)
        assert "stopped during a refresh" not in fleet["b"].logs()
        print(f"database down {DOWN:.0f} s (lease {LEASE} s): A wrote generation {generation + 1} when it came back; "
              f"{len(grants)} refresh grants, none reused; B answered {len(replies)} refreshes meanwhile")
    finally:
        stop.set()
        fleet.stop()
        proxy.release.set()
        proxy.stop()
        pg.stop("immediate")
        server.stop()
