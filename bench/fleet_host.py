"""One simulated tokend host of bench/fleet_sim.py, and a worker process that
runs a share of the fleet's hosts in its own event loop.

Each host issues tokend's own statements, copied from Sources/Fleet/
PostgresStore.swift (read), PostgresStore+Lease.swift (tryTake, leaseState,
giveUp) and PostgresLease.swift (the fenced write), with tokend's timing:
ReadPlan (PostgresStore+Watch.swift's poll), FleetTiming.leaseWait and
takeLease's order of statements, RefreshPolicy.proactiveRefreshAt, and the
broker's performFleetRefresh (SessionActor+Fleet.swift): a compare-and-refresh
read first; a host that reads a copy marked by another host's refresh waits
for the lease too (onlyIfMarked). `protocol` "before" plays the poll and the
lease wait as they were before issue 52's fix (5774bd1), and "unpaced" the fix
without the lease wait's floor of round trips, for comparison."""
import asyncio
import random
import time
from multiprocessing.connection import Connection
from typing import Any, Optional

import pgwire

PASSWORD = "fleet-db-password"  # Tests/integration/fleet.py's
SESSION = "default"
STATEMENT_TIMEOUT = 5.0  # PostgresStore.statementTimeout
LINGER = 2.0  # StoreLink.linger
FIRST_LEASE_WAIT = 0.05  # FleetTiming.firstLeaseWait

# Schema.installed: every host's first statement.
SCHEMA_CHECK = "SELECT max(version) FROM tokend_schema"
# PostgresStore.read
READ = """SELECT version, record, written_by, lease_holder, lease_epoch, extract(epoch FROM now())::float8,
    CASE WHEN lease_holder IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM
        greatest(lease_expires, pg_postmaster_start_time() + $2 * interval '1 second') - now())::float8) END
FROM tokend_shared WHERE session = $1 AND version > 0"""
# PostgresStore.tryTake
TRY_TAKE = """INSERT INTO tokend_shared AS s
    (session, version, generation, record, written_by, lease_holder, lease_epoch, lease_expires)
VALUES ($1, 0, 0, '', $2, $2, 1, now() + $3 * interval '1 second')
ON CONFLICT (session) DO UPDATE SET lease_holder = excluded.lease_holder,
    lease_epoch = s.lease_epoch + 1, lease_expires = excluded.lease_expires
WHERE s.lease_holder IS NULL
    OR greatest(s.lease_expires, pg_postmaster_start_time() + $3 * interval '1 second') <= now()
    OR (s.lease_holder = excluded.lease_holder AND s.lease_epoch = $4)
RETURNING s.lease_epoch, s.version, s.record, s.written_by, extract(epoch FROM now())::float8"""
# PostgresStore.leaseState
LEASE_STATE = """SELECT version, record, written_by, coalesce(lease_holder, ''), lease_epoch,
    CASE WHEN lease_holder IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM
        greatest(lease_expires, pg_postmaster_start_time() + $2 * interval '1 second') - now())::float8) END
FROM tokend_shared WHERE session = $1"""
# PostgresLease.write
WRITE = """WITH w AS (
    UPDATE tokend_shared SET version = version + 1, generation = $1, record = $2,
        written_by = $3, written_at = now(), lease_expires = now() + $4 * interval '1 second'
    WHERE session = $5 AND version = $6
        AND lease_holder = $3 AND lease_epoch = $7
    RETURNING version)
SELECT version, CASE WHEN $8
    THEN pg_notify('tokend', version::text || ' ' || $5)::text END,
    extract(epoch FROM now())::float8
FROM w"""
# PostgresStore.giveUp
RELEASE = """UPDATE tokend_shared SET lease_holder = NULL, lease_expires = now()
WHERE session = $1 AND lease_holder = $2 AND lease_epoch = $3"""

PAD = "x" * 1400  # a sealed record is about this long


def record_text(generation: int, expires: float, issued: float, marked: bool) -> str:
    return f"{generation}|{expires:.3f}|{issued:.3f}|{int(marked)}|{PAD}"


def parse(text: str) -> tuple[int, float, float, bool]:
    g, e, i, m, _ = text.split("|", 4)
    return int(g), float(e), float(i), m == "1"


def lease_wait(pause: float, round_trip: float, remaining: float) -> tuple[float, float]:
    """FleetTiming.leaseWait: (sleep, next pause)."""
    step = min(max(pause, round_trip * 8), remaining + 0.01)
    return step / 2 + step / 2 * random.random(), min(pause * 2, 1.0)


class Stats:
    """One worker's counts; seconds are since the run's common start (wall clock)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.per_second: dict[int, int] = {}
        self.kinds: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.latencies: list[float] = []
        self.connects = 0
        self.sockets = 0
        self.sockets_per_second: dict[int, int] = {}
        self.socket_waits = 0
        self.refreshes: list[float] = []  # time of each token write
        self.leases_taken = 0
        self.upstream_calls = 0

    def second(self) -> int:
        return int(time.time() - self.start)

    def statement(self, kind: str, latency: float) -> None:
        s = self.second()
        self.per_second[s] = self.per_second.get(s, 0) + 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.latencies.append(latency)

    def failed(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1

    def opened(self) -> None:
        self.sockets += 1
        self.connects += 1
        s = self.second()
        self.sockets_per_second[s] = max(self.sockets_per_second.get(s, 0), self.sockets)

    def closed(self) -> None:
        self.sockets -= 1


class Host:
    """One tokend host's store link, its PostgresStore's sightings and the broker's view of the copy."""

    def __init__(self, worker: "Worker", index: int) -> None:
        self.w = worker
        self.name = f"host-{index}"
        self.conn: Optional[pgwire.Connection] = None
        self.last = 0.0
        self.round_trip = 0.0
        self.turn = asyncio.Lock()  # one connection, one statement at a time
        self.version = 0  # knownVersion
        self.generation = 0
        self.expires: Optional[float] = None
        self.issued = 0.0
        self.changed = asyncio.Event()
        self.schema_checked = False
        # sightings.lease: holder, seconds left, when seen (monotonic).
        self.lease_seen: Optional[tuple[str, float, float]] = None
        self.in_flight: Optional[asyncio.Task[bool]] = None  # the broker's inFlight refresh

    # StoreLink

    async def statement(self, kind: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        w = self.w
        async with self.turn:
            if self.conn is None:
                if w.slots.locked():
                    w.stats.socket_waits += 1
                await w.slots.acquire()
                try:
                    self.conn = await asyncio.wait_for(pgwire.Connection.connect(
                        "127.0.0.1", w.bouncer_port, "tokend", PASSWORD, "tokend", f"tokend {self.name}"), 10)
                except BaseException:
                    w.slots.release()
                    raise
                w.stats.opened()
                w.connected.add(self)
            sent = time.monotonic()
            try:
                rows = await asyncio.wait_for(self.conn.fetch(sql, *args), STATEMENT_TIMEOUT)
            except BaseException:
                await self.drop()
                raise
            self.last = time.monotonic()
            self.round_trip = self.last - sent  # sightings.lastRoundTrip
            w.stats.statement(kind, self.round_trip)
            return rows

    async def run(self, kind: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """PostgresStore.run: the schema checked first (once), failures counted and raised."""
        try:
            if not self.schema_checked:
                await self.statement("schema check", SCHEMA_CHECK)
                self.schema_checked = True
            return await self.statement(kind, sql, *args)
        except (asyncio.TimeoutError, OSError, EOFError, asyncio.IncompleteReadError, pgwire.PgError) as error:
            self.w.stats.failed(f"{kind}: {type(error).__name__}: {str(error)[:60]}")
            raise

    async def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            self.w.connected.discard(self)
            self.w.stats.closed()
            self.w.slots.release()
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception:
                conn.terminate()

    # PostgresStore's sightings of the lease

    def saw_lease(self, holder: Optional[str], remaining: float) -> None:
        self.lease_seen = (holder, remaining, time.monotonic()) if holder and remaining > 0 else None

    def lease_seen_held(self) -> Optional[tuple[int, float]]:
        """PostgresStore.leaseSeenHeld: the version last read and the time left, when that read found another
        host's lease with time left."""
        if self.lease_seen is None:
            return None
        holder, remaining, seen = self.lease_seen
        left = remaining - (time.monotonic() - seen)
        return None if holder == self.name or left <= 0 else (self.version, left)

    # The broker

    def adopt(self, version: int, text: str) -> None:
        """SessionActor.adoptShared: a newer copy; one marked by another host's refresh is waited for."""
        if version <= self.version:
            return
        generation, expires, issued, marked = parse(text)
        self.version = version
        if generation > self.generation and not marked:
            self.generation, self.expires, self.issued = generation, expires, issued
            self.changed.set()
        if marked and self.in_flight is None and not self.w.stopping:
            self.in_flight = asyncio.create_task(self.refresh(self.generation, only_if_marked=True))

    async def read(self) -> Optional[int]:
        """PostgresStore.read; the copy's expiry as read (None without a copy)."""
        rows = await self.run("read", READ, SESSION, self.w.lease_time)
        if not rows:
            return None
        version, text, _, holder, _, _, remaining = rows[0]
        self.saw_lease(holder, remaining)
        self.adopt(version, text)
        return int(parse(text)[1])

    async def poll(self) -> None:
        """PostgresStore.poll with ReadPlan: the start's read, then polls on their own phase (the first at a
        random point of the interval, each next one interval ± 10 % after the last) and one extra read per
        copy at expiry − margin + 0…margin/2 that does not move them."""
        w = self.w
        await asyncio.sleep(random.uniform(0, w.poll))  # hosts start over one poll interval
        if w.protocol == "before":
            return await self.poll_before()
        started = time.monotonic()
        elapsed = lambda: time.monotonic() - started
        poll_at, refresh_of, refresh_at = w.poll * random.random(), None, None
        backoff = 1.0
        while not w.stopping:
            now = elapsed()
            if poll_at <= now + 0.001:
                poll_at = now + w.poll * (0.9 + 0.2 * random.random())
            if refresh_at is not None and refresh_at <= now + 0.001:
                refresh_at = None
            try:
                expires = await self.read()
                backoff = 1.0
                if expires != refresh_of:
                    refresh_of, refresh_at = expires, None
                    wall = time.time()
                    at = None if expires is None else expires - w.margin + w.margin / 2 * random.random()
                    if at is not None and at > wall:
                        refresh_at = elapsed() + (at - wall)
            except Exception:
                poll_at = elapsed() + backoff
                backoff = min(backoff * 2, 10)
            await asyncio.sleep(max(0.0, min(poll_at, refresh_at if refresh_at is not None else poll_at) - elapsed()))

    async def poll_before(self) -> None:
        """PostgresStore.poll before issue 52's fix (5774bd1): the next read planned from each read, at the poll
        ± 10 % or, if sooner, at expiry − margin + 0…1 s."""
        w = self.w
        backoff = 1.0
        while not w.stopping:
            try:
                expires = await self.read()
                backoff = 1.0
                wait = w.poll * (0.9 + 0.2 * random.random())
                if expires is not None:
                    due = expires - w.margin + random.random() - time.time()
                    wait = due if 0 < due < wait else wait
            except Exception:
                wait, backoff = backoff, min(backoff * 2, 10)
            await asyncio.sleep(wait)

    async def refresher(self) -> None:
        """The broker's proactive refresh (RefreshPolicy.proactiveRefreshAt), joining a refresh in flight."""
        w = self.w
        while not w.stopping:
            if self.expires is None:
                self.changed.clear()
                await self.changed.wait()
                continue
            lead = min(w.margin, (self.expires - self.issued) / 2)
            at = self.expires - lead - lead * 0.1 * random.random()
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0, at - time.time()))
                continue  # a newer copy: planned anew
            except asyncio.TimeoutError:
                pass
            # As the broker's proactiveRefresh: a wake that lost the race with an adoption (here, the copy
            # adopted between the timer and this task's turn) refreshes the generation adopted just now.
            if self.in_flight is None:
                self.in_flight = asyncio.create_task(self.refresh(self.generation, only_if_marked=False))
            if not await asyncio.shield(self.in_flight):
                await asyncio.sleep(1)

    async def refresh(self, generation: int, only_if_marked: bool) -> bool:
        """SessionActor.performFleetRefresh; false when a statement failed (counted where it failed)."""
        try:
            if not only_if_marked:
                await self.read()  # newerInFleet: one plain read
                if self.generation > generation:
                    return True
            await self.locked_refresh(generation, only_if_marked)
            return True
        except Exception:
            return False
        finally:
            self.in_flight = None

    async def take_lease(self) -> tuple[Optional[int], int, str]:
        """PostgresStore.takeLease: (epoch or None for a deferred lease, version, record text)."""
        w = self.w
        if w.protocol == "before":
            return await self.take_lease_before()
        deadline = time.monotonic() + w.lock_wait
        seen, pause = None, FIRST_LEASE_WAIT
        if held := self.lease_seen_held():  # the read just before saw the lease held: wait, then look
            seen, left = held
            sleep, pause = lease_wait(pause, 0.0 if w.protocol == "unpaced" else self.round_trip, left)
            await asyncio.sleep(sleep)
        while True:
            if seen is None and (taken := await self.try_take()):
                return taken
            asked = time.monotonic()
            rows = await self.run("lease state", LEASE_STATE, SESSION, w.lease_time)
            if not rows:
                seen = None
                continue
            round_trip = time.monotonic() - asked
            version, text, _, holder, _, remaining = rows[0]
            self.saw_lease(holder, remaining)
            if remaining == 0:
                if seen is not None and version > seen and not parse(text)[3]:
                    return None, version, text
                if taken := await self.try_take():
                    return taken
                continue  # another host took it first
            seen = seen if seen is not None else version
            if time.monotonic() > deadline:
                w.stats.failed("lease: held by another host past lockWait")
                raise TimeoutError("lease held too long")
            sleep, pause = lease_wait(pause, 0.0 if w.protocol == "unpaced" else round_trip, remaining)
            await asyncio.sleep(min(sleep, deadline - time.monotonic()))

    async def take_lease_before(self) -> tuple[Optional[int], int, str]:
        """PostgresStore.takeLease before issue 52's fix (5774bd1): a take first at every turn."""
        w = self.w
        deadline = time.monotonic() + w.lock_wait
        seen, pause = None, FIRST_LEASE_WAIT
        while True:
            if taken := await self.try_take():
                return taken
            rows = await self.run("lease state", LEASE_STATE, SESSION, w.lease_time)
            if not rows:
                continue
            version, text, _, holder, _, remaining = rows[0]
            self.saw_lease(holder, remaining)
            if remaining == 0:
                if seen is not None and version > seen and not parse(text)[3]:
                    return None, version, text
                continue
            seen = seen if seen is not None else version
            if time.monotonic() > deadline:
                w.stats.failed("lease: held by another host past lockWait")
                raise TimeoutError("lease held too long")
            step = min(pause, remaining + 0.01)
            await asyncio.sleep(step / 2 + step / 2 * random.random())
            pause = min(pause * 2, 1.0)

    async def try_take(self) -> Optional[tuple[Optional[int], int, str]]:
        rows = await self.run("lease take", TRY_TAKE, SESSION, self.name, self.w.lease_time, -1)
        if not rows:
            return None
        self.w.stats.leases_taken += 1
        self.saw_lease(self.name, self.w.lease_time)
        return rows[0][0], rows[0][1], rows[0][2]

    async def locked_refresh(self, generation: int, only_if_marked: bool) -> None:
        """fleetExclusive around performFleetRefresh's body: the holder marks, calls upstream, writes, releases.
        The simulated holder always writes a new generation, so a deferred lease never has to write."""
        w = self.w
        epoch, version, text = await self.take_lease()
        try:
            current, expires, issued, marked = parse(text) if version > 0 else (0, 0.0, 0.0, False)
            if version > 0:
                self.adopt(version, text)
            if epoch is None or (not marked and (only_if_marked or current > generation)):
                return
            rows = await self.run("write", WRITE, current, record_text(current, expires, issued, True),
                                  self.name, w.lease_time, SESSION, version, epoch, False)
            if not rows:
                return
            version = rows[0][0]
            w.stats.upstream_calls += 1
            await asyncio.sleep(w.upstream)
            now = time.time()
            text = record_text(current + 1, now + w.lifetime, now, False)
            rows = await self.run("write", WRITE, current + 1, text, self.name, w.lease_time, SESSION,
                                  version, epoch, False)
            if rows:
                w.stats.refreshes.append(time.time() - w.stats.start)
                self.adopt(rows[0][0], text)
        finally:
            if epoch is not None:
                await self.run("release", RELEASE, SESSION, self.name, epoch)
                if self.lease_seen and self.lease_seen[0] == self.name:
                    self.lease_seen = None


class Worker:
    """A share of the fleet's hosts in one process and event loop, with its own connection linger."""

    def __init__(self, indices: range, settings: dict[str, Any], start: float) -> None:
        self.poll: float = settings["poll"]
        self.margin: float = settings["margin"]
        self.lifetime: float = settings["lifetime"]
        self.lease_time: float = settings["lease_time"]
        self.lock_wait: float = settings["lock_wait"]
        self.upstream: float = settings["upstream"]
        self.bouncer_port: int = settings["bouncer_port"]
        self.protocol: str = settings["protocol"]  # "after", "before" issue 52's fix, or "unpaced" (see fleet_sim)
        self.hosts = [Host(self, i) for i in indices]
        self.slots = asyncio.Semaphore(max(1, settings["max_sockets"]))
        self.connected: set[Host] = set()
        self.stopping = False
        self.stats = Stats(start)

    async def reaper(self) -> None:
        """StoreLink's linger: a connection idle for 2 s is closed."""
        idle = lambda h: not h.turn.locked() and time.monotonic() - h.last >= LINGER
        while not self.stopping:
            await asyncio.sleep(0.1)
            for host in [h for h in self.connected if idle(h)]:
                if idle(host):  # again: a statement may have begun while an earlier host's close was awaited
                    await host.drop()

    async def run(self, start: float, duration: float) -> None:
        await asyncio.sleep(max(0.0, start - time.time()))
        tasks = [asyncio.create_task(h.poll()) for h in self.hosts]
        tasks += [asyncio.create_task(h.refresher()) for h in self.hosts]
        reaper = asyncio.create_task(self.reaper())
        await asyncio.sleep(max(0.0, start + duration - time.time()))
        self.stopping = True
        tasks += [h.in_flight for h in self.hosts if h.in_flight is not None]
        for task in tasks + [reaper]:
            task.cancel()
        await asyncio.gather(*tasks, reaper, return_exceptions=True)
        for host in list(self.connected):
            await host.drop()


def work(indices: range, settings: dict[str, Any], start: float, duration: float, results: Connection) -> None:
    """A worker process: runs its hosts, then sends its counts to `results` (a pipe's end)."""
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    worker = Worker(indices, settings, start)
    cpu = time.process_time()
    asyncio.run(worker.run(start, duration))
    stats = worker.stats
    results.send({
        "per_second": stats.per_second, "kinds": stats.kinds, "failures": stats.failures,
        "latencies": stats.latencies, "connects": stats.connects, "sockets_per_second": stats.sockets_per_second,
        "socket_waits": stats.socket_waits, "refreshes": stats.refreshes, "leases_taken": stats.leases_taken,
        "upstream_calls": stats.upstream_calls, "cpu_s": time.process_time() - cpu})
    results.close()
