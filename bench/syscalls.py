"""make bench-syscalls: the system calls tokend makes per cached GetToken at 16
connections (`strace -c -f` on the tokend process during 3 s of load from the
bench's C client), and its user and system CPU per call. Cached calls are
served by tokend's front loop, one thread, so there is no loop count to vary.

    python bench/syscalls.py BIN_DIR LOAD
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("load")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="tksc", dir="/tmp")
    daemon = bench.Daemon(args.bin_dir, directory, bench.FakeEndpoint())
    time.sleep(0.5)
    pid = daemon.process.pid
    try:
        # CPU first, without strace (which slows every system call down).
        user, system = bench.cpu_split(pid)
        run = bench.load(args.load, "throughput", daemon.socket, 16, 1, 3, bench.GET_TOKEN)
        user_after, system_after = bench.cpu_split(pid)
        calls = run["total_requests"]
        print(f"{run['rps']:,.0f} req/s; CPU per call: user {(user_after - user) * 1e6 / calls:.2f} µs, "
              f"system {(system_after - system) * 1e6 / calls:.2f} µs")
        counts = os.path.join(directory, "strace.txt")
        strace = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", counts], stderr=subprocess.DEVNULL)
        time.sleep(1)
        traced = bench.load(args.load, "throughput", daemon.socket, 16, 1, 3, bench.GET_TOKEN)
        time.sleep(0.2)
        strace.terminate()
        strace.wait()
    finally:
        daemon.stop()
    print(f"\nsystem calls during {traced['total_requests']:,} calls under strace:\n")
    with open(counts) as f:
        print(f.read())


if __name__ == "__main__":
    main()
