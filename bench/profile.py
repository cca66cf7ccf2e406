"""make bench-profile: where tokend's CPU goes while it serves cached GetToken
at 16 connections. perf record (software cpu-clock sampling, with call graphs)
on the tokend process during 5 s of load from the bench's C client; prints
perf's top entries by shared object and by symbol.

    python bench/profile.py BIN_DIR LOAD
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    bin_dir, load = sys.argv[1], sys.argv[2]
    directory = tempfile.mkdtemp(prefix="tkpf", dir="/tmp")
    data = os.path.join(directory, "perf.data")
    daemon = bench.Daemon(bin_dir, directory, bench.FakeEndpoint())
    time.sleep(0.5)
    try:
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-p", str(daemon.process.pid), "-o", data,
                                 "--", "sleep", "6"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        run = bench.load(load, "throughput", daemon.socket, 16, 1, 5, bench.GET_TOKEN)
        perf.wait()
    finally:
        daemon.stop()
    print(f"load: {run['rps']:,.0f} req/s at 16 connections\n")
    for key in ("dso", "symbol"):
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", key, "--stdio", "-g", "none"],
                                capture_output=True, text=True).stdout
        print("\n".join([line[:120] for line in report.splitlines() if "%" in line and not line.startswith("#")][:15]))
        print()


if __name__ == "__main__":
    main()
