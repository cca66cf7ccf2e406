"""`make bench` (BENCH_EXTRA): what counting costs per cached GetToken, against
the limit server's CPU per call from the same run (bench/RESULTS.json, written
by bench.py just before). The counting is measured directly, in
bench/metrics_bench.swift, built -O against TokendMetrics as a module of its
own: a build of tokend without counting is not something tokend has (no test
switches in production), and two daemons' CPU per call differ by more noise
than 3 % on a shared machine. Writes bench/METRICS.md; exits 1 over budget."""
import json
import os
import subprocess
import sys
import time

BUDGET = 0.03


def main(binary: str, results_json: str, out: str) -> int:
    with open(results_json) as f:
        results = json.load(f)
    limit_us = results["limit"]["cpu_us_per_call_16x1"]
    tokend_us = results["tokend"]["cpu_us_per_call_16x1"]
    run = subprocess.run([binary], capture_output=True, text=True, check=True, timeout=300)
    costs = json.loads(run.stdout)
    rows = [("same call again on a connection (held counter)", costs["repeated_ns"]),
            ("call answered anew (counter found by comparing the method)", costs["fresh_ns"])]
    worst = max(cost for _, cost in rows) / 1000 / limit_us
    lines = [
        f"# Metrics: what counting costs a cached GetToken ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "", f"The limit server's figure is from the `make bench` run in [RESULTS.md](RESULTS.md) ({results['date']}, "
        f"{results['machine']}), which `make bench` runs just before this.",
        f"Limit server CPU per call at 16 connections: {limit_us:.3f} µs; tokend's: {tokend_us:.3f} µs"
        f" ({tokend_us / limit_us:.2f}× the limit).", "",
        "| path | counting, CPU ns per call | share of the limit's CPU per call |", "|---|---:|---:|"]
    lines += [f"| {name} | {cost:.1f} | {cost / 1000 / limit_us:.2%} |" for name, cost in rows]
    lines += ["", f"A call to another method, which goes to a task (microseconds, not counted here as a cached"
              f" call), finds its counter in a table: {costs['other_ns']:.1f} ns.",
              "", f"Budget: {BUDGET:.0%}. Worst path: {worst:.2%}: {'within' if worst <= BUDGET else 'OVER'} budget.", ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if worst <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
