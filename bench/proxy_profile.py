"""make bench-proxy-profile: where tokend-proxy's time goes at 16 keep-alive connections.

The stand of bench/proxy_nginx.py (tokend, the nginx upstream, tokend-proxy on TCP). First wrk
alone: requests/s and the CPU per request of tokend-proxy and of tokend. Then `strace -c -f` on
tokend-proxy during a wrk run: system calls per request. Then `perf record` (software cpu-clock
sampling, call graphs) on tokend-proxy during a wrk run: its samples by part of the program (kernel,
Swift runtime, SwiftNIO, the proxy's own code), then perf's top entries by shared object and
by symbol. Last, calls per request that time samples cannot count and the host's load does not
move: the Swift runtime's main reference-counting entry points (swift_retain, swift_release; not
their _n, bridge-object or unknown-object variants), its exclusivity checks (swift_beginAccess) and
malloc, counted by uprobes (`perf probe`) during a wrk run; then, from a recording, who calls the
Swift ones (SwiftNIO, the proxy's own code, the rest) and the functions that call them most. The
caller comes from the frame-pointer call chain taken at the probed function's entry, which names the
immediate caller on Linux 6.12 or later (this machine runs 6.18); malloc, which does not start by
pushing a frame pointer, is counted but not attributed. The probes slow the proxy down about tenfold
while they count; they are removed afterwards.

    python bench/proxy_profile.py BIN_DIR [--seconds 5] [--connections 16]
"""
import argparse
import os
import re
import shutil
import signal
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
        calls = calls_per_request(pid, port, args.connections, directory)
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
    print(f"\ncalls per request, counted ({calls['requests']:,} requests under uprobes), and who calls them:\n")
    for name, count in calls["counts"].items():
        by_part = ", ".join(f"{part} {share:.0f} %" for part, share in calls["callers"].get(name, ([], []))[0])
        print(f"  {name:<18} {count:7.1f}   {by_part}")
    for name, (_, top) in calls["callers"].items():
        print(f"\n{name}: the callers that make most of its calls\n")
        for caller, share in top:
            print(f"  {share:5.1f} %  {caller}")
    shutil.rmtree(directory, ignore_errors=True)


# The runtime calls counted, by library; the probes go in a group of their own (removed afterwards).
PROBED = {"libswiftCore.so": ["swift_retain", "swift_release", "swift_beginAccess"], "libc.so.6": ["malloc"]}
ATTRIBUTED = ["swift_retain", "swift_release", "swift_beginAccess"]  # they push a frame pointer first
GROUP = "tkproxy"


def calls_per_request(pid: int, port: int, connections: int, directory: str) -> dict:
    """Runtime calls per request (uprobes), and the share of each made by SwiftNIO, the proxy's own
    code and the rest, from the caller of each call in a recording."""
    libraries = {}
    for line in open(f"/proc/{pid}/maps"):
        path = line.split()[-1]
        for name in PROBED:
            if os.path.basename(path) == name:
                libraries[name] = path
    events = []
    subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)
    stat = perf = None
    try:
        for name, functions in PROBED.items():
            for function in functions:
                subprocess.run(["perf", "probe", "-q", "-x", libraries[name], f"{GROUP}:{function}={function}"],
                               check=True, capture_output=True)
                events.append(f"{GROUP}:{function}")
        counted = os.path.join(directory, "calls.csv")
        stat = subprocess.Popen(["perf", "stat", "-x", ",", "-o", counted, "-e", ",".join(events), "-p", str(pid)])
        time.sleep(0.5)
        run = proxy_nginx.wrk(port, connections, 3)
        time.sleep(0.2)
        stat.send_signal(signal.SIGINT)
        stat.wait()
        counts = {}
        for line in open(counted):
            fields = line.strip().split(",")
            if len(fields) > 2 and fields[2].startswith(GROUP + ":"):
                counts[fields[2].split(":")[1]] = int(fields[0]) / run["requests"]
        recorded = os.path.join(directory, "calls.data")
        attributed = [f"{GROUP}:{function}" for function in ATTRIBUTED]
        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", ",".join(attributed), "-p", str(pid), "-o",
                                 recorded, "--", "sleep", "2.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        proxy_nginx.wrk(port, connections, 2)
        perf.wait()
        script = subprocess.run(["perf", "script", "-i", recorded, "-F", "event,ip,sym", "--max-stack", "2"],
                                capture_output=True, text=True).stdout
    finally:
        # No perf may hold the probes when they are deleted.
        for process in (stat, perf):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        if events:
            deleted = subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True, text=True)
            if deleted.returncode != 0:
                print(f"could not remove the probes ({deleted.stderr.strip()}): perf probe -d '{GROUP}:*'", file=sys.stderr)
    return {"requests": run["requests"], "counts": counts, "callers": callers(script)}


def callers(script: str) -> dict[str, tuple[list[tuple[str, float]], list[tuple[str, float]]]]:
    """From `perf script -F event,ip,sym --max-stack 2`: for each probed function, the share of its calls
    whose caller is in SwiftNIO, in tokend-proxy's own code, or elsewhere (the runtime, other modules),
    and the five callers (demangled) that make most of them."""
    tally: dict[str, dict[str, int]] = {}
    by_caller: dict[str, dict[str, int]] = {}
    for block in script.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if len(lines) < 3:
            continue
        event = lines[0].rstrip(":").split(":")[-1]
        caller = lines[2].split(None, 1)[-1]
        part = module(caller) or "the rest"
        tally.setdefault(event, {}).setdefault(part, 0)
        tally[event][part] += 1
        by_caller.setdefault(event, {}).setdefault(caller, 0)
        by_caller[event][caller] += 1
    result = {}
    for event, parts in tally.items():
        total = sum(parts.values())
        top = sorted(by_caller[event].items(), key=lambda item: -item[1])[:5]
        names = subprocess.run(["swift-demangle", "--simplified"], input="\n".join(name for name, _ in top),
                               capture_output=True, text=True).stdout.splitlines() if shutil.which("swift-demangle") else []
        if len(names) != len(top):
            names = [name for name, _ in top]
        result[event] = (sorted(((part, 100 * n / total) for part, n in parts.items()), key=lambda item: -item[1]),
                         [(name[:110], 100 * n / total) for name, (_, n) in zip(names, top)])
    return result


def module(symbol: str) -> str | None:
    """The part of the program a mangled Swift symbol is in: SwiftNIO's modules, tokend-proxy's own, or None."""
    if re.match(r"\$s\d+NIO", symbol):
        return "SwiftNIO"
    if symbol.startswith("$s12tokend_proxy"):
        return "tokend-proxy's own code"
    return None


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
        else:
            part = module(symbol) or "rest of the binary (other packages, generics)"
        shares[part] = shares.get(part, 0.0) + share
    return sorted(shares.items(), key=lambda item: -item[1])


if __name__ == "__main__":
    main()
