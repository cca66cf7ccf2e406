"""make bench-proxy-profile: where tokend-proxy's time goes at 16 keep-alive connections.

The stand of bench/proxy_nginx.py (tokend, the nginx upstream, tokend-proxy on TCP). First wrk
alone: requests/s and the CPU per request of tokend-proxy and of tokend. Then `strace -c -f` on
tokend-proxy during a wrk run: system calls per request. Then `perf record` (software cpu-clock
sampling, call graphs) on tokend-proxy during a wrk run: its samples by part of the program (kernel,
Swift runtime, SwiftNIO, the proxy's own code), then perf's top entries by shared object and
by symbol.

    python bench/proxy_profile.py BIN_DIR [--seconds 5] [--connections 16]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_nginx  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--symbols", type=int, default=40)
    args = parser.parse_args()
    proxy_nginx.bench.raise_nofile()
    directory = tempfile.mkdtemp(prefix="tkproxypf", dir="/tmp")
    stand = proxy_nginx.Stand(args.bin_dir, directory)
    assert stand.proxy is not None
    pid, port = stand.proxy.pid, stand.proxy_port
    data = os.path.join(directory, "perf.data")
    counts = os.path.join(directory, "strace.txt")
    try:
        proxy_nginx.wrk(port, args.connections, 1)
        tokend = proxy_nginx.cpu_seconds([stand.daemon.process.pid])
        run = proxy_nginx.measure(port, [pid], args.connections, args.seconds)
        tokend = proxy_nginx.cpu_seconds([stand.daemon.process.pid]) - tokend
        print(f"{run['rps']:,.0f} req/s at {args.connections} connections, p50 {run['p50_us']:,.0f} µs; CPU per "
              f"request: tokend-proxy {run['cpu_us_per_request']:.1f} µs, tokend {tokend * 1e6 / run['requests']:.1f} µs")
        strace = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", counts], stderr=subprocess.DEVNULL)
        time.sleep(1)
        traced = proxy_nginx.wrk(port, args.connections, args.seconds)
        time.sleep(0.2)
        strace.terminate()
        strace.wait()
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", data,
                                 "--", "sleep", str(args.seconds + 1)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        proxy_nginx.wrk(port, args.connections, args.seconds)
        perf.wait()
    finally:
        stand.stop()
    print(f"\nsystem calls per request ({traced['requests']:,} requests under strace):\n")
    with open(counts) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
                print(f"  {fields[-1]:<20} {int(fields[3]) / traced['requests']:8.2f}")
    print("\nperf, by part:\n")
    for part, share in parts(data):
        print(f"  {part:<40} {share:6.2f} %")
    for key in ("dso", "symbol"):
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", key, "--stdio", "-g", "none"],
                                capture_output=True, text=True).stdout
        lines = [line[:140] for line in report.splitlines() if "%" in line and not line.startswith("#")]
        print(f"\nperf, by {key}:\n")
        print("\n".join(lines[:args.symbols]))
    shutil.rmtree(directory, ignore_errors=True)


def parts(data: str) -> list[tuple[str, float]]:
    """perf's samples by part of the program: the kernel, the Swift runtime, libc and the loader,
    SwiftNIO (its modules are linked into the binary), the proxy's own code, the rest of the binary."""
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "--stdio",
                             "-g", "none"], capture_output=True, text=True).stdout
    shares: dict[str, float] = {}
    for line in report.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(\S+)", line)
        if not match:
            continue
        share, dso, kind, symbol = float(match.group(1)), match.group(2), match.group(3), match.group(4)
        if kind == "k":
            part = "kernel"
        elif dso.startswith("libswift") or dso.startswith("libFoundation"):
            part = "Swift runtime and Foundation"
        elif dso != "tokend-proxy":
            part = "libc, the loader, vdso"
        elif re.match(r"\$s\d+NIO", symbol):
            part = "SwiftNIO"
        elif symbol.startswith("$s12tokend_proxy"):
            part = "tokend-proxy's own code"
        else:
            part = "rest of the binary (other packages, generics)"
        shares[part] = shares.get(part, 0.0) + share
    return sorted(shares.items(), key=lambda item: -item[1])


if __name__ == "__main__":
    main()
