"""make bench-proxy-floor: nginx, tokend-proxy and a Swift floor doing the same forwarding, in one run.

The floor (bench/proxy_floor.swift, built here with swiftc -O) is the least a proxy written in Swift
close to the system calls does per request, with no framework: two threads with an epoll each, one
upstream connection kept per client, a head read whole, an Authorization line added, the answer read
whole and sent back; no header checked, no timer, no backpressure. What tokend-proxy needs above it is
its own work per request (every header parsed and checked, deadlines, tokend's answers, backpressure)
and SwiftNIO's channels with the runtime calls both make; a loop of the proxy's own could narrow the
second part, not the first. The stand is bench/proxy_nginx.py's (tokend logged in, the nginx upstream,
nginx as the proxy, tokend-proxy on TCP); each path's token is checked at the upstream first; each
round runs the three at `--connections`, every other round in the opposite order. Medians over the
rounds of requests/s and of CPU per request (user + system, /proc; each a median of its own, so the
parts need not add up to the whole). Any answer not 2xx, or socket error, fails the run.

    python bench/proxy_floor.py BIN_DIR [--rounds 8] [--seconds 3] [--connections 16]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_nginx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if args.rounds % 2:
        parser.error("--rounds must be even: each order is run as often as the other")
    proxy_nginx.bench.raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkfloor", dir="/tmp")
    stand = None
    floor = None
    try:
        binary = os.path.join(directory, "proxy-floor")
        swiftc = shutil.which("swiftc") or "/opt/swift/usr/bin/swiftc"
        subprocess.run([swiftc, "-O", "-import-objc-header", os.path.join(HERE, "proxy_floor.h"),
                        os.path.join(HERE, "proxy_floor.swift"), "-o", binary], check=True)
        stand = proxy_nginx.Stand(args.bin_dir, directory)
        floor_port = proxy_nginx.free_port()
        with open(os.path.join(directory, "floor.log"), "w") as log:
            floor = subprocess.Popen([binary, str(floor_port), str(stand.up_port), stand.token], stderr=log)
        proxy_nginx.wait_for_port(floor_port, floor, binary)
        targets = stand.targets()
        paths = {"nginx as the proxy": targets["nginx"], "tokend-proxy": targets["tokend-proxy"],
                 "Swift floor (no framework)": (floor_port, [floor.pid])}
        for name, (port, _) in paths.items():
            stand.check(port, name)
            proxy_nginx.wrk(port, args.connections, 1)
        runs: dict[str, list[dict]] = {name: [] for name in paths}
        for index in range(args.rounds):
            order = list(paths.items()) if index % 2 == 0 else list(reversed(paths.items()))
            for name, (port, pids) in order:
                runs[name].append(proxy_nginx.measure(port, pids, args.connections, args.seconds))
        # Which of the floor's two threads took each connection (it writes one line per connection).
        with open(os.path.join(directory, "floor.log")) as log:
            accepted = [line.split()[-1] for line in log if line.startswith("accepted on thread")]
    finally:
        if floor is not None:
            floor.kill()
            floor.wait()
        if stand is not None:
            stand.stop()
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{args.connections} connections, {args.rounds} rounds of {args.seconds} s; medians over the rounds; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| path | requests/s | p50 (µs) | CPU/request (µs) (user + system) | not 2xx, or socket errors |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, rows in runs.items():
        med = {key: statistics.median(r[key] for r in rows) for key in ("rps", "p50_us", "cpu_us_per_request",
                                                                         "user_us_per_request", "system_us_per_request")}
        failed = sum(proxy_nginx.errors(r) for r in rows)
        print(f"| {name} | {med['rps']:,.0f} | {med['p50_us']:,.0f} | {med['cpu_us_per_request']:.1f} "
              f"({med['user_us_per_request']:.1f} + {med['system_us_per_request']:.1f}) | {failed:,.0f} |")
    print(f"\nThe floor's connections by thread: {', '.join(f'{accepted.count(t)} on thread {t}' for t in sorted(set(accepted)))}.")
    if any(proxy_nginx.errors(r) for rows in runs.values() for r in rows):
        sys.exit("answers that were not 2xx, or socket errors: these figures are not a proxy's rate")


if __name__ == "__main__":
    main()
