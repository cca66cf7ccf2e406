"""Runs inside `unshare -m` with a private tmpfs on /run/systemd/journal:
binds a datagram socket where libsystemd sends journal entries, runs the
command given after `--`, and writes every entry it received (as a list of
{FIELD: value}) to OUT as JSON.

    unshare -m sh -c 'mount -t tmpfs tmpfs /run/systemd/journal && \
        python journal_capture.py OUT -- command ...'
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading


def parse(datagram):
    """The journal's native protocol: KEY=value lines, or KEY, newline,
    64-bit little-endian length, binary value, newline."""
    fields = {}
    i = 0
    while i < len(datagram):
        newline = datagram.index(b"\n", i)
        line = datagram[i:newline]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = newline + 1
        else:
            key = line
            (length,) = struct.unpack("<Q", datagram[newline + 1:newline + 9])
            value = datagram[newline + 9:newline + 9 + length]
            i = newline + 9 + length + 1
        fields[key.decode()] = value.decode(errors="replace")
    return fields


def main():
    out = sys.argv[1]
    command = sys.argv[sys.argv.index("--") + 1:]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("/run/systemd/journal/socket")
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    entries = []
    done = threading.Event()

    def receive():
        server.settimeout(0.2)
        while not done.is_set():
            try:
                entries.append(parse(server.recv(1 << 20)))
            except socket.timeout:
                continue

    thread = threading.Thread(target=receive)
    thread.start()
    code = subprocess.call(command)
    done.set()
    thread.join()
    with open(out, "w") as f:
        json.dump(entries, f)
    sys.exit(code)


if __name__ == "__main__":
    main()
