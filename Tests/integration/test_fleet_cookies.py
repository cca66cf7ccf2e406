"""Cookie changes on three hosts of a fleet at once: each is answered only once it is the fleet's.

A login, logout or cookie change holds the fleet's lease from its read to its write: a lease taken only
at the write (a refresh's alone) let another host write between them, and the change was fenced off
unseen while its caller heard it applied (an outside review lost 2 of 653 imports this way)."""
import threading
import time

from conftest import login, wait_for
from fleet import fleet_of, pg  # noqa: F401 (fixtures)

URL = "http://127.0.0.1/app"


def cookies(host):
    """The cookies the importers set (the login's own, sid and tracker, left out)."""
    reply = host.call("io.tokend.Broker.GetCookies", url=URL)[1]
    return {c["name"]: c["value"] for c in reply["parameters"]["cookies"] if c["name"][:1] in "abc"}


def test_concurrent_cookie_imports_on_three_hosts_lose_none(server, fleet_of, pg):
    fleet = fleet_of(server).start()
    login(fleet["a"], server)
    generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
    fleet.wait_generation(generation)
    epoch = int(pg.sql("SELECT lease_epoch FROM tokend_shared", database="tokend"))
    applied = {name: {} for name in "abc"}  # host -> cookie -> the last value it was told was applied
    stop = threading.Event()

    def importer(name):
        i = 0
        while not stop.is_set():
            cookie = f"{name}{i % 12}"  # each host its own names: the last value applied is the fleet's
            reply = fleet[name].call("io.tokend.Broker.ImportCookies", url=URL,
                                     setCookie=[f"{cookie}={i}; Max-Age=3600"])[1]
            if "error" not in reply and reply["parameters"]["applied"] == 1:
                applied[name][cookie] = str(i)

            i += 1

    threads = [threading.Thread(target=importer, args=(name,), daemon=True) for name in "abc"]
    for thread in threads:
        thread.start()
    time.sleep(10)  # the situation: three hosts changing the fleet's cookies at once, for 10 s
    stop.set()
    for thread in threads:
        thread.join(30)
    expected = {cookie: value for by_host in applied.values() for cookie, value in by_host.items()}
    writes = sum(len(by_host) for by_host in applied.values())
    assert all(applied[name] for name in "abc"), f"every host had imports applied: {applied}"
    # Every host, once it has polled, holds every cookie at the last value its importer was told was applied.
    try:
        wait_for(lambda: all(cookies(fleet[name]) == expected for name in "abc"), 20, "every host at the fleet's cookies")
    except AssertionError:
        held = {name: cookies(fleet[name]) for name in "abc"}
        lost = {c: (v, held["a"].get(c)) for c, v in expected.items() if held["a"].get(c) != v}
        lost.update({c: (None, v) for c, v in held["a"].items() if c not in expected})
        raise AssertionError(f"applied but not the fleet's (cookie: applied, held): {lost}; "
                             f"hosts agree: {held['a'] == held['b'] == held['c']}")
    after = int(pg.sql("SELECT lease_epoch FROM tokend_shared", database="tokend"))
    counts = {name: len(applied[name]) for name in "abc"}
    print(f"\ncookies applied per host {counts}, lease epoch {epoch} -> {after}")
    assert after > epoch + writes, "the imports took the lease (concurrently, from three hosts)"
