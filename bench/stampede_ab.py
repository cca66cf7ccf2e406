"""The stampede measured by two load clients against one tokend, alternating:
where does a long tail come from, tokend or the client?

    python bench/stampede_ab.py BIN_DIR LOAD_A LOAD_B [--clients 10000] [--rounds 3]

Each round makes the stampede session's token need a refresh (the bench's
50 ms upstream), then runs `LOAD burst` with every client asking at once, and
prints p50/p99/max beyond the upstream's 50 ms for each client. README's A/B
(the load client before and after it kept its connections open) is

    git show fa6a9dc:bench/load.c > /tmp/load-old.c && gcc -O2 -o /tmp/load-old /tmp/load-old.c -lpthread
    gcc -O2 -o .build/bench/load bench/load.c -lpthread
    .venv/bin/python bench/stampede_ab.py .build/release /tmp/load-old .build/bench/load
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

REQUEST = '{"method":"io.tokend.Broker.GetToken","parameters":{"session":"stampede"}}'


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("load_a")
    parser.add_argument("load_b")
    parser.add_argument("--clients", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bench.raise_nofile()
    daemon = bench.Daemon(args.bin_dir, tempfile.mkdtemp(prefix="tkab", dir="/tmp"), bench.FakeEndpoint())
    time.sleep(0.5)
    print("| round | client | p50 / p99 / max beyond the 50 ms upstream (ms) |\n| ---: | --- | --- |")
    try:
        for round in range(1, args.rounds + 1):
            for binary in (args.load_a, args.load_b):
                status = daemon.call("GetStatus", session="stampede")["parameters"]["status"]
                time.sleep(max(0, status["expiresAt"] - 4.5 - time.time()))  # inside min-valid: a refresh is due
                r = bench.load(binary, "burst", daemon.socket, args.clients, REQUEST)
                print(f"| {round} | {binary} | {r['p50_us'] / 1000 - 50:.0f} / {r['p99_us'] / 1000 - 50:.0f} / "
                      f"{r['max_us'] / 1000 - 50:.0f} |", flush=True)
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
