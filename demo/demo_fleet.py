"""make demo-fleet: one OAuth grant shared by three hosts through PostgreSQL.

Starts a real PostgreSQL 15 (initdb in a temporary directory, run as user
postgres), the authorization server (django-oauth-toolkit on 127.0.0.1,
rotation and reuse protection on, access tokens of 12 s) and three tokend
"hosts" a, b and c with `shared-store` pointing at the database. Then:

1. log in on host a; b and c serve the same session;
2. 300 callers on each host ask for a token while it needs refreshing: the
   server sees one refresh for the whole fleet;
3. kill -9 host a; b refreshes, c has the new token at once; a restarts and
   serves the fleet's token;
4. log out on c: every host is logged out.
Everything started here is stopped at the end.
"""
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "Tests", "integration"))

from conftest import AuthServer, login, wait_for  # noqa: E402
from fleet import Fleet, Postgres  # noqa: E402
from test_fleet import token_burst  # noqa: E402


def say(text=""):
    print(text, flush=True)


def main():
    workdir = tempfile.mkdtemp(prefix="tkf", dir="/tmp")  # Unix socket paths must stay short
    os.chmod(workdir, 0o711)
    pg = server = fleet = None
    try:
        say("== starting PostgreSQL 15, the authorization server and tokend on hosts a, b, c")
        pg = Postgres(os.path.join(workdir, "pg"))
        server = AuthServer(os.path.join(workdir, "as"), access_ttl=12)
        fleet = Fleet(workdir, server, pg, **{"refresh-margin": 0, "min-valid": 4}).start()
        say(f"   shared store: {pg.url('127.0.0.1')}")

        say("\n== logging in on host a (the refresh token enters tokend once)")
        login(fleet["a"], server)
        status = fleet.status("a")
        fleet.wait_generation(status["generation"])
        tokens = {name: fleet[name].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["accessToken"]
                  for name in "abc"}
        say(f"   hosts serving the session: {', '.join(sorted(tokens))}; distinct tokens: {len(set(tokens.values()))}")

        say("\n== waiting until the token needs refreshing, then 300 callers on each host ask at once")
        wait_for(lambda: time.time() >= status["expiresAt"] - 3, 20, "token inside its min-valid window")
        before = len(server.grants("refresh_token"))
        started = time.time()
        results = token_burst([(fleet[name].socket, 300) for name in "abc"])
        elapsed = time.time() - started
        grants = server.grants("refresh_token")[before:]
        errors = [r for r in results if "error" in r]
        handed = {r["parameters"]["token"]["accessToken"] for r in results if "error" not in r}
        say(f"   refresh grants the server saw: {len(grants)}  (for {len(results)} callers on 3 hosts)")
        say(f"   distinct tokens handed out: {len(handed)}, errors: {len(errors)}, in {elapsed * 1000:.0f} ms")
        say(f"   upstream refreshes per host (a counts its login check): "
            f"{ {name: fleet.status(name)['refreshes'] for name in 'abc'} }")

        say("\n== kill -9 host a; host b refreshes")
        fleet["a"].process.kill()
        fleet["a"].process.wait(10)
        generation = fleet.status("b")["generation"]
        reply = fleet["b"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
        assert "error" not in reply, reply
        new = reply["parameters"]["token"]
        fleet.wait_generation(new["generation"], hosts="c")
        say(f"   host c has generation {new['generation']} too: "
            f"{fleet['c'].call('io.tokend.Broker.GetToken')[1]['parameters']['token']['accessToken'] == new['accessToken']}")
        fleet["a"].start()
        fleet.wait_generation(new["generation"], hosts="a")
        served = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["accessToken"]
        say(f"   host a restarted and serves the fleet's token: {served == new['accessToken']}")

        say("\n== logging out on host c")
        reply = fleet["c"].call("io.tokend.Broker.Logout")[1]
        assert "error" not in reply, reply
        for name in "ab":
            wait_for(lambda: fleet.status(name)["state"] == "loggedOut", 10, f"host {name} logged out")
        say("   hosts a and b: logged out")
        record = pg.sql("SELECT record FROM tokend_sessions", database="tokend")
        say(f"   the database row is sealed (AES-GCM), no token in it: {new['accessToken'] not in record}")
    finally:
        say("\n== stopping tokend, the authorization server and PostgreSQL")
        if fleet:
            fleet.stop()
        if server:
            server.stop()
        if pg:
            pg.stop("fast")
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
