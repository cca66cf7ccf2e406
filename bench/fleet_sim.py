"""Fleet at a thousand hosts (issue 52): N light clients, each one tokend host's
store traffic, against a real PostgreSQL 15 (max_connections = 20) through a real
PgBouncer 1.18 in transaction mode (pool 5), both run by user postgres in a
temporary directory by Tests/integration/fleet.py's helpers.

Each simulated host issues tokend's own statements, copied from
Sources/Fleet/PostgresStore.swift (read), PostgresStore+Lease.swift (tryTake,
leaseState, release), PostgresLease.swift (the fenced write) on the schema of
Sources/Fleet/Schema.swift (the version 2 table, copied here), with tokend's
timing (FleetTiming.nextRead, FleetTiming.leaseWait, RefreshPolicy.proactiveRefreshAt):
  - poll: a read every POLL s ± 10 %, or at expiry − margin + 0…1 s if sooner;
  - the broker's proactive refresh at expiry − lead − lead·0.1·jitter
    (lead = min(margin, lifetime / 2)): a compare-and-refresh read; still stale →
    the lease (INSERT … ON CONFLICT … RETURNING); the holder writes the marker
    (fenced), calls "upstream" (UPSTREAM s), writes the token (fenced), releases;
    the others poll the lease row (50 ms doubling to 1 s) and adopt the new copy;
  - one connection per host, opened when it has a statement and closed 2 s after
    its last one (StoreLink's linger), unnamed prepared statements (as PostgresNIO).
Then today's design beside it: each host holding two direct connections (the
session advisory lock's and LISTEN's), counted until PostgreSQL refuses.

    python bench/fleet_sim.py --hosts 1000 10000 [--lifetime 60] [--results bench/README.md]
"""
import argparse
import asyncio
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import asyncpg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Tests", "integration"))
import fleet as fleet_module  # noqa: E402

PASSWORD = fleet_module.PASSWORD
SESSION = "default"

# Sources/Fleet/Schema.swift, version 2's table (the lease protocol), as tokend creates it.
SCHEMA = [
    "CREATE TABLE IF NOT EXISTS tokend_schema (version integer NOT NULL)",
    """CREATE TABLE tokend_shared (
        session text PRIMARY KEY,
        version bigint NOT NULL,
        generation bigint NOT NULL,
        record text NOT NULL,
        written_by text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        lease_holder text,
        lease_epoch bigint NOT NULL DEFAULT 0,
        lease_expires timestamptz NOT NULL DEFAULT 'epoch'
    )""",
    "INSERT INTO tokend_schema (version) VALUES (2)",
]
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


def record_text(generation, expires, issued, marked):
    return f"{generation}|{expires:.3f}|{issued:.3f}|{int(marked)}|{PAD}"


def parse(text):
    g, e, i, m, _ = text.split("|", 4)
    return int(g), float(e), float(i), m == "1"


class Stats:
    def __init__(self):
        self.start = time.monotonic()
        self.per_second = {}
        self.kinds = {}
        self.failures = {}
        self.latencies = []
        self.connects = 0
        self.sockets = 0
        self.sockets_max = 0
        self.sockets_per_second = {}
        self.socket_waits = 0
        self.refreshes = []  # (time, generation) of each token write
        self.leases_taken = 0
        self.upstream_calls = 0

    def second(self):
        return int(time.monotonic() - self.start)

    def statement(self, kind, latency):
        s = self.second()
        self.per_second[s] = self.per_second.get(s, 0) + 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.latencies.append(latency)

    def failed(self, what):
        self.failures[what] = self.failures.get(what, 0) + 1

    def opened(self):
        self.sockets += 1
        self.connects += 1
        self.sockets_max = max(self.sockets_max, self.sockets)
        s = self.second()
        self.sockets_per_second[s] = max(self.sockets_per_second.get(s, 0), self.sockets)

    def closed(self):
        self.sockets -= 1


class Host:
    """One tokend host's store link and the broker's view of the shared copy."""

    def __init__(self, sim, index):
        self.sim = sim
        self.name = f"host-{index}"
        self.conn = None
        self.last = 0.0
        self.turn = asyncio.Lock()  # one connection, one statement at a time
        self.version = 0
        self.generation = 0
        self.expires = None
        self.issued = None
        self.changed = asyncio.Event()
        self.schema_checked = False

    async def statement(self, kind, sql, *args):
        sim = self.sim
        async with self.turn:
            if self.conn is None:
                if sim.slots.locked():
                    sim.stats.socket_waits += 1
                await sim.slots.acquire()
                try:
                    self.conn = await asyncio.wait_for(asyncpg.connect(
                        host="127.0.0.1", port=sim.bouncer_port, user="tokend", password=PASSWORD,
                        database="tokend", ssl=False, statement_cache_size=0, server_settings={}), 10)
                except BaseException:
                    sim.slots.release()
                    raise
                sim.stats.opened()
                sim.connected.add(self)
            sent = time.monotonic()
            try:
                rows = await asyncio.wait_for(self.conn.fetch(sql, *args), sim.statement_timeout)
            except BaseException:
                await self.drop()
                raise
            self.last = time.monotonic()
            sim.stats.statement(kind, self.last - sent)
            return rows

    async def run(self, kind, sql, *args):
        """A statement as tokend's link runs it: schema checked first (once), failures counted and raised."""
        try:
            if not self.schema_checked:
                await self.statement("schema check", SCHEMA_CHECK)
                self.schema_checked = True
            return await self.statement(kind, sql, *args)
        except (asyncio.TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            self.sim.stats.failed(f"{kind}: {type(error).__name__}: {str(error)[:60]}")
            raise

    async def drop(self):
        conn, self.conn = self.conn, None
        if conn is not None:
            self.sim.connected.discard(self)
            self.sim.stats.closed()
            self.sim.slots.release()
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception:
                conn.terminate()

    def adopt(self, version, text):
        if version <= self.version:
            return
        generation, expires, issued, marked = parse(text)
        self.version = version
        if generation > self.generation and not marked:
            self.generation, self.expires, self.issued = generation, expires, issued
            self.changed.set()

    async def read(self):
        rows = await self.run("read", READ, SESSION, self.sim.lease_time)
        if rows:
            self.adopt(rows[0][0], rows[0][1])
        return rows[0] if rows else None

    async def poll(self):
        """PostgresStore.poll with FleetTiming.nextRead."""
        sim = self.sim
        await asyncio.sleep(random.uniform(0, sim.poll))  # hosts start over one poll interval
        backoff = 1.0
        while not sim.stopping:
            try:
                await self.read()
                backoff = 1.0
                wait = sim.poll * (0.9 + 0.2 * random.random())
                if self.expires is not None:
                    due = self.expires - sim.margin + random.random() - time.time()
                    if 0 < due < wait:
                        wait = due
            except Exception:
                wait, backoff = backoff, min(backoff * 2, 10)
            await asyncio.sleep(wait)

    async def refresher(self):
        """The broker's proactive refresh (RefreshPolicy.proactiveRefreshAt) through performFleetRefresh."""
        sim = self.sim
        while not sim.stopping:
            if self.expires is None:
                self.changed.clear()
                await self.changed.wait()
                continue
            lead = min(sim.margin, (self.expires - self.issued) / 2)
            at = self.expires - lead - lead * 0.1 * random.random()
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0, at - time.time()))
                continue  # a newer copy: planned anew
            except asyncio.TimeoutError:
                pass
            try:
                await self.fleet_refresh(self.generation)
            except Exception:
                await asyncio.sleep(1)

    async def fleet_refresh(self, generation):
        sim = self.sim
        # newerInFleet: one plain read.
        await self.read()
        if self.generation > generation:
            return
        # lock(): takeLease.
        seen = None
        pause = 0.05
        deadline = time.monotonic() + sim.lock_wait
        while True:
            rows = await self.run("lease take", TRY_TAKE, SESSION, self.name, sim.lease_time, -1)
            if rows:
                epoch, version, text = rows[0][0], rows[0][1], rows[0][2]
                sim.stats.leases_taken += 1
                break
            rows = await self.run("lease state", LEASE_STATE, SESSION, sim.lease_time)
            if not rows:
                continue
            version, text, _, holder, _, remaining = rows[0]
            if remaining == 0:
                if seen is not None and version > seen and not parse(text)[3]:
                    self.adopt(version, text)  # a lease with no epoch: nothing to release
                    return
                continue
            seen = seen if seen is not None else version
            if time.monotonic() > deadline:
                raise TimeoutError("lease held too long")
            step = min(pause, remaining + 0.01)
            await asyncio.sleep(step / 2 + step / 2 * random.random())
            pause = min(pause * 2, 1.0)
        try:
            current_generation, _, _, marked = parse(text) if version > 0 else (0, 0, 0, False)
            if version > 0:
                self.adopt(version, text)
            if current_generation > generation and not marked:
                return
            # The marker, fenced; the upstream call; the token, fenced.
            now = time.time()
            rows = await self.run("write", WRITE, current_generation, record_text(current_generation, now, now, True),
                                  self.name, sim.lease_time, SESSION, version, epoch, False)
            if not rows:
                return
            version = rows[0][0]
            sim.stats.upstream_calls += 1
            await asyncio.sleep(sim.upstream)
            now = time.time()
            text = record_text(current_generation + 1, now + sim.lifetime, now, False)
            rows = await self.run("write", WRITE, current_generation + 1, text, self.name, sim.lease_time, SESSION,
                                  version, epoch, False)
            if rows:
                sim.stats.refreshes.append((time.monotonic() - sim.stats.start, current_generation + 1))
                self.adopt(rows[0][0], text)
        finally:
            await self.run("release", RELEASE, SESSION, self.name, epoch)


class Simulation:
    def __init__(self, hosts, bouncer, pg, args):
        self.hosts = [Host(self, i) for i in range(hosts)]
        self.bouncer = bouncer
        self.bouncer_port = bouncer.port
        self.pg = pg
        self.poll = args.poll
        self.margin = args.margin
        self.lifetime = args.lifetime
        self.lease_time = float(args.lease_time)
        self.lock_wait = args.lease_time + 15
        self.upstream = args.upstream
        self.statement_timeout = 5.0
        self.slots = asyncio.Semaphore(args.max_sockets)
        self.connected = set()
        self.stopping = False
        self.stats = Stats()
        self.backends = {}  # second -> max tokend backends in pg_stat_activity
        self.pools = {}  # second -> max (cl_active, cl_waiting, sv_active, maxwait)

    async def reaper(self):
        """StoreLink's linger: a connection idle for 2 s is closed."""
        while not self.stopping:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            for host in [h for h in self.connected if not h.turn.locked() and now - h.last >= 2.0]:
                await host.drop()

    async def sample_backends(self):
        conn = await asyncpg.connect(host=self.pg.directory, port=self.pg.port, user="postgres", database="postgres")
        try:
            while not self.stopping:
                n = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE usename = 'tokend'")
                s = self.stats.second()
                self.backends[s] = max(self.backends.get(s, 0), n)
                await asyncio.sleep(0.2)
        finally:
            await conn.close()

    async def sample_pools(self):
        while not self.stopping:
            process = await asyncio.create_subprocess_exec(
                "psql", "-h", "127.0.0.1", "-p", str(self.bouncer_port), "-U", "tokend", "-d", "pgbouncer", "-A",
                "-F", "\t", "-c", "SHOW POOLS", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=dict(os.environ, PGPASSWORD=PASSWORD))
            out, _ = await process.communicate()
            s = self.stats.second()
            lines = [line.split("\t") for line in out.decode().splitlines() if "\t" in line]
            for f in lines[1:]:
                row = dict(zip(lines[0], f))
                if row.get("database") == "tokend":
                    values = tuple(int(row.get(k, 0)) for k in ("cl_active", "cl_waiting", "sv_active", "maxwait"))
                    old = self.pools.get(s, (0, 0, 0, 0))
                    self.pools[s] = tuple(max(a, b) for a, b in zip(old, values))
            await asyncio.sleep(0.5)

    async def run(self, duration):
        tasks = [asyncio.create_task(h.poll()) for h in self.hosts]
        tasks += [asyncio.create_task(h.refresher()) for h in self.hosts]
        helpers = [asyncio.create_task(c) for c in (self.reaper(), self.sample_backends(), self.sample_pools())]
        await asyncio.sleep(duration)
        self.stopping = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        for host in list(self.connected):
            await host.drop()


def summarize(sim, hosts, duration):
    st = sim.stats
    settle = int(sim.poll) + 1  # the first poll interval starts the hosts: left out of the steady figures
    seconds = range(settle, int(duration))
    total = sum(st.per_second.get(s, 0) for s in seconds)
    refresh_seconds = sorted({int(t) for t, _ in st.refreshes})
    window = set()
    for r in refresh_seconds:
        window.update(range(r - 3, r + 4))
    window = sorted(s for s in window if s in seconds)
    steady = [s for s in seconds if s not in window]
    latencies = sorted(st.latencies)
    pct = lambda p: latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000 if latencies else 0
    return {
        "hosts": hosts,
        "upstream_calls": st.upstream_calls,
        "refreshes": len(st.refreshes),
        "leases_taken": st.leases_taken,
        "statements": sum(st.kinds.values()),
        "kinds": dict(sorted(st.kinds.items())),
        "stmt_per_s_steady": sum(st.per_second.get(s, 0) for s in steady) / max(1, len(steady)),
        "stmt_per_s_overall": total / max(1, len(seconds)),
        "stmt_per_s_expiry_peak": max((st.per_second.get(s, 0) for s in window), default=0),
        "stmt_per_host_min": total / max(1, len(seconds)) * 60 / hosts,
        "sockets_max": st.sockets_max,
        "sockets_steady_max": max((st.sockets_per_second.get(s, 0) for s in steady), default=0),
        "sockets_expiry_max": max((st.sockets_per_second.get(s, 0) for s in window), default=0),
        "connects": st.connects,
        "socket_waits": st.socket_waits,
        "backends_max": max(sim.backends.values(), default=0),
        "backends_expiry_max": max((sim.backends.get(s, 0) for s in window), default=0),
        "cl_active_max": max((v[0] for v in sim.pools.values()), default=0),
        "cl_waiting_max": max((v[1] for v in sim.pools.values()), default=0),
        "sv_active_max": max((v[2] for v in sim.pools.values()), default=0),
        "maxwait_s": max((v[3] for v in sim.pools.values()), default=0),
        "failures": sum(st.failures.values()),
        "failure_kinds": dict(sorted(st.failures.items(), key=lambda kv: -kv[1])[:5]),
        "latency_p50_ms": round(pct(0.5), 1),
        "latency_p99_ms": round(pct(0.99), 1),
        "latency_max_ms": round(pct(1.0), 1),
        "refresh_times_s": [round(t, 1) for t, _ in st.refreshes],
    }


async def held_connections(pg, limit=100):
    """Today's (schema 1) design: each host holds two direct connections, the session advisory lock's
    and LISTEN's. Hosts connect one after another until PostgreSQL refuses."""
    held, admitted, refusal = [], 0, None
    try:
        for host in range(limit):
            pair = []
            for _ in range(2):
                try:
                    conn = await asyncpg.connect(host="127.0.0.1", port=pg.port, user="tokend", password=PASSWORD,
                                                 database="tokend", ssl=False)
                except (asyncpg.PostgresError, OSError) as error:
                    refusal = f"{type(error).__name__}: {error}"
                    break
                pair.append(conn)
                held.append(conn)
            if len(pair) < 2:
                break
            if host == 0:  # the lock's holder; the others' lock connections wait on it in tokend, idle here
                await pair[0].execute("SELECT pg_advisory_lock(1953459054, hashtext('default'))")
            await pair[1].execute("LISTEN tokend")
            admitted += 1
        return admitted, len(held), refusal
    finally:
        for conn in held:
            conn.terminate()


def start_servers(work, max_client_conn, auth):
    pg = fleet_module.Postgres(os.path.join(work, "pg"), settings=("max_connections=20",))
    bouncer = fleet_module.PgBouncer(os.path.join(work, "bouncer"), pg, pool=5, mode="transaction")
    # The helper's PgBouncer admits 2,000 clients and authenticates with SCRAM; a fleet needs more clients.
    bouncer.stop()
    with open(bouncer.config) as f:
        config = f.read()
    config = config.replace("max_client_conn = 2000", f"max_client_conn = {max_client_conn}")
    config = config.replace("auth_type = scram-sha-256", f"auth_type = {auth}")
    with open(bouncer.config, "w") as f:
        f.write(config)
    bouncer.start()
    return pg, bouncer


async def create_schema(pg):
    conn = await asyncpg.connect(host="127.0.0.1", port=pg.port, user="tokend", password=PASSWORD,
                                 database="tokend", ssl=False)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(1953459054, 0)")  # as Schema.migrate
            for statement in SCHEMA:
                await conn.execute(statement)
    finally:
        await conn.close()


async def seed(pg, lifetime, start_in):
    """The session's row: version 1, a token issued now that expires `start_in + lifetime` from now."""
    conn = await asyncpg.connect(host="127.0.0.1", port=pg.port, user="tokend", password=PASSWORD,
                                 database="tokend", ssl=False)
    try:
        await conn.execute("DELETE FROM tokend_shared")
        now = time.time()
        await conn.execute(
            "INSERT INTO tokend_shared (session, version, generation, record, written_by) VALUES ($1, 1, 1, $2, 'seed')",
            SESSION, record_text(1, now + lifetime, now, False))
    finally:
        await conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--lifetime", type=float, default=60, help="token lifetime, s")
    parser.add_argument("--lifetimes", type=float, default=2)
    parser.add_argument("--margin", type=float, default=10, help="refresh-margin, s")
    parser.add_argument("--poll", type=float, default=10)
    parser.add_argument("--lease-time", type=float, default=35, help="upstream-timeout (30) + 5")
    parser.add_argument("--upstream", type=float, default=0.2, help="the token endpoint's answer time, s")
    parser.add_argument("--max-sockets", type=int, default=12000)
    parser.add_argument("--auth", default="md5")
    parser.add_argument("--results", help="append the markdown table here")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # PgBouncer inherits it
    directory = tempfile.mkdtemp(prefix="fleet-sim-")
    os.chmod(directory, 0o711)
    results = []
    try:
        pg, bouncer = start_servers(directory, max(2000, min(hard - 200, args.max_sockets + 100)), args.auth)
        try:
            asyncio.run(create_schema(pg))
            admitted, held, refusal = asyncio.run(held_connections(pg))
            old = {"hosts_admitted": admitted, "connections_held": held, "refusal": refusal}
            print("today's design:", old, flush=True)
            duration = args.lifetime * args.lifetimes + args.poll
            for n in args.hosts:
                asyncio.run(seed(pg, args.lifetime, args.poll))
                bouncer.stop()  # a fresh pool and fresh SHOW figures for each fleet
                bouncer.start()
                sim = Simulation(n, bouncer, pg, args)
                asyncio.run(sim.run(duration))
                summary = summarize(sim, n, duration)
                print(summary, flush=True)
                results.append(summary)
        finally:
            bouncer.stop()
            pg.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    table = markdown(results, old, args)
    print(table)
    if args.results:
        write_results(args.results, table)


def write_results(path, table):
    """Replaces the run between the markers of the results file's section (bench/README.md), or appends it."""
    begin, end = "<!-- fleet_sim run -->", "<!-- /fleet_sim run -->"
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += block + "\n"
    with open(path, "w") as f:
        f.write(text)


def markdown(results, old, args):
    cores = os.cpu_count()
    lines = [
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}, {cores} cores, "
        f"{platform.processor() or platform.machine()}; `{' '.join(['python'] + sys.argv)}`. "
        f"Token lifetime {args.lifetime:g} s × {args.lifetimes:g}, refresh-margin {args.margin:g} s, "
        f"poll {args.poll:g} s ± 10 %, lease {args.lease_time:g} s, upstream answer {args.upstream * 1000:g} ms, "
        f"PgBouncer auth {args.auth}. The first poll interval (hosts starting) is left out of the rates; "
        "\"at expiry\" is the 7 s around each refresh.",
        "",
        "| hosts | statements/s (steady) | statements/s (peak second at expiry) | statements/host/min | "
        "client connections max (steady / at expiry) | PgBouncer cl_active / cl_waiting max | "
        "backends in pg_stat_activity max | upstream refreshes | leases taken | failed | latency p50/p99/max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['hosts']:,} | {r['stmt_per_s_steady']:.0f} | {r['stmt_per_s_expiry_peak']:,} | "
            f"{r['stmt_per_host_min']:.1f} | {r['sockets_steady_max']:,} / {r['sockets_expiry_max']:,} | "
            f"{r['cl_active_max']:,} / {r['cl_waiting_max']:,} | {r['backends_max']} | {r['upstream_calls']} | "
            f"{r['leases_taken']} | {r['failures']} | {r['latency_p50_ms']}/{r['latency_p99_ms']}/"
            f"{r['latency_max_ms']} |")
    lines += [
        "",
        f"Today's design (schema 1: a session advisory lock connection and a LISTEN connection per host, direct): "
        f"with max_connections = 20, {old['hosts_admitted']} hosts got both connections "
        f"({old['connections_held']} held), the next was refused: `{old['refusal']}`.",
        "",
        "Statements by kind: " + "; ".join(
            f"{r['hosts']:,} hosts: " + ", ".join(f"{k} {v:,}" for k, v in r["kinds"].items()) for r in results),
        "",
        "Failures: " + ("; ".join(f"{r['hosts']:,} hosts: {r['failure_kinds']}" for r in results if r["failures"])
                        or "none"),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
