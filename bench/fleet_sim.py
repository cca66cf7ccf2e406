"""Fleet at thousands of hosts (issue 52): N simulated tokend hosts, each one
host's store traffic (bench/fleet_host.py: tokend's own statements and timing),
against a real PostgreSQL 15 (max_connections = 20) through a real PgBouncer 1.18
in transaction mode (pool 5), both run by user postgres in a temporary directory
by Tests/integration/fleet.py's helpers. The hosts are spread over `--procs`
worker processes, each with its own event loop; a host opens one connection when
it has a statement and closes it 2 s after its last (StoreLink's linger), and
sends each statement as tokend (PostgresWire) does (bench/pgwire.py). Then today's
design beside it: each host holding two direct connections (the session
advisory lock's and LISTEN's), counted until PostgreSQL refuses.

    python bench/fleet_sim.py --hosts 1000 5000 10000 [--procs 3] [--results bench/README.md]
"""
import argparse
import asyncio
import multiprocessing
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Tests", "integration"))
import fleet as fleet_module  # noqa: E402
import fleet_host  # noqa: E402
import pgwire  # noqa: E402

PASSWORD = fleet_module.PASSWORD
TICK = os.sysconf("SC_CLK_TCK")

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


async def direct(pg: Any, user: str = "tokend") -> pgwire.Connection:
    return await pgwire.Connection.connect("127.0.0.1", pg.port, user, PASSWORD, "tokend" if user == "tokend"
                                           else "postgres", "fleet_sim")


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User and system CPU seconds each process has used so far, with its children that have ended
    (a backend PgBouncer closed is counted in its postmaster's)."""
    used = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            used[pid] = sum(int(v) for v in fields[11:15]) / TICK
        except (OSError, IndexError):
            pass
    return used


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two cpu_seconds() of a group (a process new since then counted whole)."""
    return sum(seconds - before.get(pid, 0) for pid, seconds in after.items())


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def server_pids(pg: Any, bouncer: Any) -> tuple[list[int], list[int]]:
    """PgBouncer, and the postmaster with its children (backends, background workers)."""
    with open(os.path.join(pg.data, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                    children.append(int(pid))
        except (OSError, ValueError, IndexError):
            pass
    return [bouncer.process.pid], [postmaster] + children


class Samples:
    """What the parent sees while the workers run: backends in pg_stat_activity and PgBouncer's SHOW POOLS."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.stopping = False
        self.backends: dict[int, int] = {}  # second -> max tokend backends
        self.pools: dict[int, tuple[int, ...]] = {}  # second -> max (cl_active, cl_waiting, sv_active, maxwait)

    def second(self) -> int:
        return int(time.time() - self.start)

    async def sample_backends(self, pg: Any) -> None:
        conn = await direct(pg, "postgres")
        try:
            while not self.stopping:
                rows = await conn.fetch("SELECT count(*) FROM pg_stat_activity WHERE usename = 'tokend'")
                s = self.second()
                self.backends[s] = max(self.backends.get(s, 0), rows[0][0])
                await asyncio.sleep(0.2)
        finally:
            await conn.close()

    async def sample_pools(self, bouncer: Any) -> None:
        while not self.stopping:
            process = await asyncio.create_subprocess_exec(
                "psql", "-h", "127.0.0.1", "-p", str(bouncer.port), "-U", "tokend", "-d", "pgbouncer", "-A",
                "-F", "\t", "-c", "SHOW POOLS", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=dict(os.environ, PGPASSWORD=PASSWORD))
            out, _ = await process.communicate()
            s = self.second()
            lines = [line.split("\t") for line in out.decode().splitlines() if "\t" in line]
            for f in lines[1:]:
                row = dict(zip(lines[0], f))
                if row.get("database") == "tokend":
                    values = tuple(int(row.get(k, 0)) for k in ("cl_active", "cl_waiting", "sv_active", "maxwait"))
                    old = self.pools.get(s, (0, 0, 0, 0))
                    self.pools[s] = tuple(max(a, b) for a, b in zip(old, values))
            await asyncio.sleep(0.5)

    async def run(self, pg: Any, bouncer: Any, until: float) -> None:
        tasks = [asyncio.create_task(self.sample_backends(pg)), asyncio.create_task(self.sample_pools(bouncer))]
        await asyncio.sleep(max(0.0, until - time.time()))
        self.stopping = True
        await asyncio.gather(*tasks, return_exceptions=True)


def run_fleet(n: int, args: argparse.Namespace, pg: Any, bouncer: Any,
              duration: float) -> tuple[dict[str, Any], Samples, dict[str, Any]]:
    """The fleet's hosts over `args.procs` worker processes from a common start; the merged counts."""
    settings = {"poll": args.poll, "margin": args.margin, "lifetime": args.lifetime,
                "lease_time": float(args.lease_time), "lock_wait": args.lease_time + 15, "upstream": args.upstream,
                "max_sockets": args.max_sockets // args.procs, "bouncer_port": bouncer.port,
                "protocol": args.protocol}
    start = time.time() + 3  # the workers' start-up
    context = multiprocessing.get_context("fork")
    workers = []
    for p in range(args.procs):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=fleet_host.work, daemon=True,
                                  args=(range(p, n, args.procs), settings, start, duration, send))
        process.start()
        send.close()
        workers.append((process, receive))
    def servers() -> tuple[dict[int, float], dict[int, float], tuple[int, int], float]:
        bouncer_pids, pg_pids = server_pids(pg, bouncer)
        return cpu_seconds(bouncer_pids), cpu_seconds(pg_pids), machine_busy(), os.getloadavg()[0]

    before = servers()
    samples = Samples(start)
    asyncio.run(samples.run(pg, bouncer, start + duration))
    after = servers()
    parts = []
    for process, receive in workers:
        parts.append(receive.recv() if receive.poll(120) else None)
        process.join(30)
    parts = [p for p in parts if p]
    busy = (after[2][0] - before[2][0]) / max(1, after[2][1] - before[2][1])
    machine = {"load_before": before[3], "load_after": after[3], "busy": busy,
               "workers_cpu_s": sum(p["cpu_s"] for p in parts), "bouncer_cpu_s": cpu_since(before[0], after[0]),
               "pg_cpu_s": cpu_since(before[1], after[1]), "workers_reported": len(parts),
               "busy_cpu_s": (after[2][0] - before[2][0]) / TICK}
    # What the rest of the machine used meanwhile (other work on it; this process's samplers).
    machine["others_cpu_s"] = machine["busy_cpu_s"] - sum(
        machine[k] for k in ("workers_cpu_s", "bouncer_cpu_s", "pg_cpu_s"))
    return merge(parts), samples, machine


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"per_second": {}, "kinds": {}, "failures": {}, "sockets_per_second": {}, "latencies": [],
              "refreshes": [], "connects": 0, "socket_waits": 0, "leases_taken": 0, "upstream_calls": 0}
    for part in parts:
        for key in ("per_second", "kinds", "failures", "sockets_per_second"):
            for k, v in part[key].items():
                merged[key][k] = merged[key].get(k, 0) + v  # sockets: the sum of the workers' per-second maxima
        for key in ("latencies", "refreshes"):
            merged[key] += part[key]
        for key in ("connects", "socket_waits", "leases_taken", "upstream_calls"):
            merged[key] += part[key]
    merged["refreshes"].sort()
    return merged


def summarize(st: dict[str, Any], samples: Samples, machine: dict[str, Any], hosts: int, duration: float,
              poll: float) -> dict[str, Any]:
    settle = int(poll) + 1  # the first poll interval starts the hosts: left out of the steady figures
    seconds = range(settle, int(duration))
    total = sum(st["per_second"].get(s, 0) for s in seconds)
    window = set()
    for r in {int(t) for t in st["refreshes"]}:
        window.update(range(r - 3, r + 4))
    window = sorted(s for s in window if s in seconds)
    steady = [s for s in seconds if s not in window]
    latencies = sorted(st["latencies"])
    pct = lambda p: latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000 if latencies else 0
    expiry_rate = sum(st["per_second"].get(s, 0) for s in window) / max(1, len(window))
    return {
        "hosts": hosts,
        "upstream_calls": st["upstream_calls"],
        "refreshes": len(st["refreshes"]),
        "leases_taken": st["leases_taken"],
        "statements": sum(st["kinds"].values()),
        "kinds": dict(sorted(st["kinds"].items())),
        "stmt_per_s_steady": sum(st["per_second"].get(s, 0) for s in steady) / max(1, len(steady)),
        "stmt_per_s_expiry_mean": expiry_rate,
        "stmt_per_s_expiry_peak": max((st["per_second"].get(s, 0) for s in window), default=0),
        "stmt_per_s_steady_peak": max((st["per_second"].get(s, 0) for s in steady), default=0),
        "stmt_per_host_min": total / max(1, len(seconds)) * 60 / hosts,
        "sockets_steady_max": max((st["sockets_per_second"].get(s, 0) for s in steady), default=0),
        "sockets_expiry_max": max((st["sockets_per_second"].get(s, 0) for s in window), default=0),
        "connects": st["connects"],
        "connects_per_s": st["connects"] / max(1, duration),
        "backends_max": max(samples.backends.values(), default=0),
        "cl_active_max": max((v[0] for v in samples.pools.values()), default=0),
        "cl_waiting_max": max((v[1] for v in samples.pools.values()), default=0),
        "cl_waiting_expiry_max": max((samples.pools.get(s, (0, 0))[1] for s in window), default=0),
        "maxwait_s": max((v[3] for v in samples.pools.values()), default=0),
        "failures": sum(st["failures"].values()),
        "failure_kinds": dict(sorted(st["failures"].items(), key=lambda kv: -kv[1])[:5]),
        "latency_p50_ms": round(pct(0.5), 1),
        "latency_p99_ms": round(pct(0.99), 1),
        "latency_max_ms": round(pct(1.0), 1),
        "refresh_times_s": [round(t, 1) for t in st["refreshes"]],
        "machine": {k: round(v, 2) if isinstance(v, float) else v for k, v in machine.items()},
    }


async def held_connections(pg: Any, limit: int = 100) -> tuple[int, int, Optional[str]]:
    """Today's (schema 1) design: each host holds two direct connections, the session advisory lock's
    and LISTEN's. Hosts connect one after another until PostgreSQL refuses."""
    held, admitted, refusal = [], 0, None
    try:
        for host in range(limit):
            pair = []
            for _ in range(2):
                try:
                    conn = await direct(pg)
                except (pgwire.PgError, OSError) as error:
                    refusal = f"{type(error).__name__}: {error}"
                    break
                pair.append(conn)
                held.append(conn)
            if len(pair) < 2:
                break
            if host == 0:  # the lock's holder; the others' lock connections wait on it in tokend, idle here
                await pair[0].fetch("SELECT pg_advisory_lock(1953459054, hashtext('default'))")
            await pair[1].fetch("LISTEN tokend")
            admitted += 1
        return admitted, len(held), refusal
    finally:
        for conn in held:
            conn.terminate()


def start_servers(work: str, max_client_conn: int, auth: str) -> tuple[Any, Any]:
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


async def create_schema(pg: Any) -> None:
    conn = await direct(pg)
    try:
        await conn.fetch("BEGIN")
        await conn.fetch("SELECT pg_advisory_xact_lock(1953459054, 0)")  # as Schema.migrate
        for statement in SCHEMA:
            await conn.fetch(statement)
        await conn.fetch("COMMIT")
    finally:
        await conn.close()


async def seed(pg: Any, lifetime: float) -> None:
    """The session's row: version 1, a token issued now that expires `lifetime` from now."""
    conn = await direct(pg)
    try:
        await conn.fetch("DELETE FROM tokend_shared")
        now = time.time()
        await conn.fetch(
            "INSERT INTO tokend_shared (session, version, generation, record, written_by) VALUES ($1, 1, 1, $2, 'seed')",
            fleet_host.SESSION, fleet_host.record_text(1, now + lifetime, now, False))
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--procs", type=int, default=2, help="worker processes the hosts are spread over")
    parser.add_argument("--lifetime", type=float, default=60, help="token lifetime, s")
    parser.add_argument("--lifetimes", type=float, default=2)
    parser.add_argument("--margin", type=float, default=10, help="refresh-margin, s")
    parser.add_argument("--poll", type=float, default=10)
    parser.add_argument("--lease-time", type=float, default=35, help="upstream-timeout (30) + 5")
    parser.add_argument("--upstream", type=float, default=0.2, help="the token endpoint's answer time, s")
    parser.add_argument("--max-sockets", type=int, default=12000)
    parser.add_argument("--auth", default="md5", choices=("md5", "scram-sha-256"))
    parser.add_argument("--protocol", default="after", choices=("after", "before", "unpaced"),
                        help="tokend's poll and lease wait as they are, as before issue 52's fix (5774bd1), or "
                        "as they are but without the lease wait's floor of eight round trips")
    parser.add_argument("--results", help="replace the run in this file's fleet section (bench/README.md)")
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
                asyncio.run(seed(pg, args.lifetime))
                bouncer.stop()  # a fresh pool and fresh SHOW figures for each fleet
                bouncer.start()
                merged, samples, machine = run_fleet(n, args, pg, bouncer, duration)
                summary = summarize(merged, samples, machine, n, duration, args.poll)
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


def write_results(path: str, table: str) -> None:
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


def markdown(results: list[dict[str, Any]], old: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}, {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}; `{' '.join(['python'] + sys.argv)}`. "
        f"{args.procs} worker processes, tokend's timing: {args.protocol}. Token lifetime {args.lifetime:g} s × "
        f"{args.lifetimes:g}, refresh-margin {args.margin:g} s, poll {args.poll:g} s ± 10 %, lease "
        f"{args.lease_time:g} s, upstream answer "
        f"{args.upstream * 1000:g} ms, PgBouncer auth {args.auth}. The first poll interval (hosts starting) is left "
        "out of the rates; \"at expiry\" is the 7 s around each refresh.",
        "",
        "| hosts | statements/s steady (peak second) | statements/s at expiry: mean (peak second) | "
        "client connections max, steady / at expiry | connections opened/s | PgBouncer cl_active / cl_waiting max "
        "(cl_waiting at expiry) "
        "| backends max | upstream refreshes | leases taken | failed | latency p50/p99/max ms | "
        "load avg before → after; CPU busy | CPU s: workers / PgBouncer / PostgreSQL / rest of the machine |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r["machine"]
        lines.append(
            f"| {r['hosts']:,} | {r['stmt_per_s_steady']:.0f} ({r['stmt_per_s_steady_peak']:,}) | "
            f"{r['stmt_per_s_expiry_mean']:,.0f} ({r['stmt_per_s_expiry_peak']:,}) | "
            f"{r['sockets_steady_max']:,} / {r['sockets_expiry_max']:,} | {r['connects_per_s']:.0f} | "
            f"{r['cl_active_max']:,} / {r['cl_waiting_max']:,} ({r['cl_waiting_expiry_max']:,}) | "
            f"{r['backends_max']} | {r['upstream_calls']} | "
            f"{r['leases_taken']} | {r['failures']:,} | {r['latency_p50_ms']}/{r['latency_p99_ms']}/"
            f"{r['latency_max_ms']} | {m['load_before']:.1f} → {m['load_after']:.1f}; {m['busy'] * 100:.0f} % | "
            f"{m['workers_cpu_s']:.0f} / {m['bouncer_cpu_s']:.0f} / {m['pg_cpu_s']:.0f} / {m['others_cpu_s']:.0f} |")
    lines += [
        "",
        f"Today's design (schema 1: a session advisory lock connection and a LISTEN connection per host, direct): "
        f"with max_connections = 20, {old['hosts_admitted']} hosts got both connections "
        f"({old['connections_held']} held), the next was refused: `{old['refusal']}`.",
        "",
        "Statements by kind: " + "; ".join(
            f"{r['hosts']:,} hosts: " + ", ".join(f"{k} {v:,}" for k, v in r["kinds"].items()) for r in results),
        "",
        "Refreshes written at (s from start): " + "; ".join(
            f"{r['hosts']:,} hosts: {r['refresh_times_s']}" for r in results),
        "",
        "Failures: " + ("; ".join(f"{r['hosts']:,} hosts: {r['failure_kinds']}" for r in results if r["failures"])
                        or "none"),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
