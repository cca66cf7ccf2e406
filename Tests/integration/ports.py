"""Loopback ports for the tests' servers, never handed out twice at once.

A port found free (bound to 0, then closed) is free only until someone else
binds it: with the tests running side by side (pytest-xdist workers, and other
people's runs on the same machine), two workers could be handed the same port
between one's check and its server's bind, or a server stopped and started
again on its port could find it taken. So every port handed out here is
recorded in one table for the whole machine (a file under a lock) and not
handed out again for PORT_HOLD seconds, and the ports come from below the
kernel's ephemeral range, which no outgoing connection is given."""
from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import time

TABLE = "/tmp/tokend-test-ports.json"
LOCK = TABLE + ".lock"
PORT_HOLD = 1800  # longer than any one test, restarts of its servers included
LOWEST = 10000


def _range() -> tuple[int, int]:
    """Ports below the ephemeral range (32768 by default), which the kernel never picks itself."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (LOWEST, low) if low - LOWEST >= 4096 else (1024, low)


def _bindable(port: int, family: int, host: str) -> bool:
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port(count: int = 1, family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    """A port (the first of `count` consecutive ones) no one listens on and no test here was given
    in the last PORT_HOLD seconds; it stays this caller's for that long."""
    low, high = _range()
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(TABLE) as f:
                given = {int(port): at for port, at in json.load(f).items()}
        except (OSError, ValueError):
            given = {}
        now = time.time()
        given = {port: at for port, at in given.items() if now - at < PORT_HOLD}
        for _ in range(10000):
            first = random.randrange(low, high - count)
            ports = range(first, first + count)
            if any(p in given for p in ports) or not all(_bindable(p, family, host) for p in ports):
                continue
            given.update({p: now for p in ports})
            written = TABLE + f".{os.getpid()}"
            with open(written, "w") as f:
                json.dump(given, f)
            os.replace(written, TABLE)
            return first
        raise RuntimeError(f"no free loopback port in {low}-{high}")
