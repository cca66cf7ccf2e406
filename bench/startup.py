"""make bench-startup: how fast tokend is ready.

- exec -> READY=1: time from starting tokend to its READY=1 on a test-owned
  NOTIFY_SOCKET (no network needed: the session's endpoint is never called).
- socket-activated first reply: time from connecting to a socket held by
  systemd-socket-activate (tokend not yet running) to the reply of the call.

    python3 bench/startup.py [BIN_DIR] [RUNS]
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, ".build", "debug")
RUNS = 10


def config(directory):
    path = os.path.join(directory, "tokend.toml")
    with open(path, "w") as f:
        f.write(f'[daemon]\nsocket = "{directory}/sock"\nstate-directory = "{directory}/state"\n'
                '[sessions.default]\ntoken-endpoint = "http://127.0.0.1:9/token"\nclient-id = "bench"\n'
                'client-auth = "none"\n')
    return path


def exec_to_ready(directory, run):
    path = os.path.join(directory, f"notify{run}")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(path)
    notify.settimeout(20)
    started = time.monotonic()
    process = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", config(directory)],
                               env=dict(os.environ, NOTIFY_SOCKET=path), stderr=subprocess.DEVNULL)
    try:
        while "READY=1" not in notify.recv(4096).decode().split("\n"):
            pass
        return (time.monotonic() - started) * 1000
    finally:
        process.terminate()
        process.wait()
        notify.close()


def activated_first_reply(directory):
    sock = os.path.join(directory, "activated")
    process = subprocess.Popen(["systemd-socket-activate", "-l", sock, "--fdname=varlink",
                                os.path.join(BIN, "tokend"), "--config", config(directory)],
                               stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(sock):
            time.sleep(0.01)
        started = time.monotonic()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
            s.sendall(b'{"method":"io.tokend.Broker.GetStatus"}\0')
            data = b""
            while not data.endswith(b"\0"):
                data += s.recv(65536)
        assert "status" in json.loads(data[:-1])["parameters"]
        return (time.monotonic() - started) * 1000
    finally:
        process.terminate()
        process.wait()
        os.path.exists(sock) and os.unlink(sock)


def main():
    global BIN, RUNS
    if len(sys.argv) > 1:
        BIN = sys.argv[1]
    if len(sys.argv) > 2:
        RUNS = int(sys.argv[2])
    directory = tempfile.mkdtemp(prefix="tkb", dir="/tmp")
    try:
        ready = [exec_to_ready(directory, run) for run in range(RUNS)]
        first = [activated_first_reply(directory) for _ in range(RUNS)]
        print(f"binaries: {BIN}, {RUNS} runs each")
        for label, values in (("exec -> READY=1", ready), ("socket-activated first reply", first)):
            print(f"{label:30} median {statistics.median(values):6.1f} ms   "
                  f"min {min(values):6.1f}   max {max(values):6.1f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
