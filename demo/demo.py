"""make demo: tokend vs. a naive pool of clients against a real
authorization server (django-oauth-toolkit on 127.0.0.1, refresh-token
rotation and reuse protection on, no grace period).

1. tokend owns a session; 200 clients ask it for a token at the moment the
   token needs refreshing. The server sees one refresh; everyone gets the
   same new token; the session lives on.
2. The same 200 clients each hold the refresh token themselves and refresh
   at once. The server sees 200 refreshes of one token, detects reuse and
   revokes the whole token family: everyone is logged out.
Everything started here is stopped at the end.
"""
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, ".build", "debug")
CLIENTS = 200
TTL = 15


def say(text=""):
    print(text, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, **fields):
    request = urllib.request.Request(url, data=urllib.parse.urlencode(fields).encode())
    request.add_header("Authorization", "Basic " + base64.b64encode(b"tokend-test:tokend-test-secret").decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, json.loads(body) if body.startswith(b"{") else {}


def grants(directory):
    path = os.path.join(directory, "grants.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f if '"refresh_token"' in line]


def varlink(path, method, parameters=None):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(json.dumps({"method": method, "parameters": parameters or {}}).encode() + b"\0")
        data = b""
        while not data.endswith(b"\0"):
            data += s.recv(65536)
        return json.loads(data[:-1])


def together(count, work):
    barrier = threading.Barrier(count)
    results = [None] * count

    def run(i):
        barrier.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main():
    workdir = tempfile.mkdtemp(prefix="tkdemo", dir="/tmp")
    processes = []
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server_dir = os.path.join(workdir, "as")
        say(f"== starting django-oauth-toolkit on {base} (rotation + reuse protection, grace 0, "
            f"access tokens live {TTL} s)")
        server = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "Tests", "authserver", "serve.py"), server_dir, str(port),
             "--access-ttl", str(TTL), "--workers", "4"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        processes.append(server)
        while not os.path.exists(os.path.join(server_dir, "ready")):
            time.sleep(0.1)

        sock = os.path.join(workdir, "sock")
        with open(os.open(os.path.join(workdir, "secret"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("tokend-test-secret\n")
        config = os.path.join(workdir, "tokend.toml")
        with open(config, "w") as f:
            f.write(f"""[daemon]
socket = "{sock}"
state-directory = "{workdir}/state"
[sessions.default]
token-endpoint = "{base}/o/token/"
revocation-endpoint = "{base}/o/revoke_token/"
client-id = "tokend-test"
client-secret-file = "{workdir}/secret"
# No proactive refresh, so the {CLIENTS} clients below meet an expiring token.
refresh-margin = 0
min-valid = 5
""")
        say("== starting tokend")
        log = open(os.path.join(workdir, "tokend.log"), "w")
        tokend = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", config], stdout=log, stderr=log)
        processes.append(tokend)
        while not os.path.exists(sock):
            time.sleep(0.05)

        say("== logging in: password grant -> first refresh token -> tokenctl login (via stdin)")
        _, grant = post(base + "/o/token/", grant_type="password", username="alice", password="alice-password")
        login = subprocess.run([os.path.join(BIN, "tokenctl"), "login", "--socket", sock],
                               input=grant["refresh_token"], capture_output=True, text=True)
        say("   " + login.stdout.strip().replace("\n", "\n   "))

        status = varlink(sock, "io.tokend.Broker.GetStatus")["parameters"]["status"]
        wait = status["expiresAt"] - 4 - time.time()
        say(f"\n== waiting {wait:.0f} s until the access token has less than min-valid (5 s) left")
        time.sleep(max(0, wait))
        before = len(grants(server_dir))
        say(f"== {CLIENTS} clients ask tokend for a token at the same moment")

        def ask(_):
            return varlink(sock, "io.tokend.Broker.GetToken")

        started = time.time()
        replies = together(CLIENTS, ask)
        elapsed = time.time() - started
        seen = grants(server_dir)[before:]
        tokens = {r["parameters"]["token"]["accessToken"] for r in replies if "error" not in r}
        errors = [r for r in replies if "error" in r]
        after = varlink(sock, "io.tokend.Broker.GetStatus")["parameters"]["status"]
        alive = "error" not in varlink(sock, "io.tokend.Broker.Refresh")
        say(f"   refresh grants the server saw:  {len(seen)}  ({', '.join(str(g['status']) for g in seen)})")
        say(f"   distinct tokens handed out:     {len(tokens)} to {CLIENTS - len(errors)} clients, "
            f"{len(errors)} errors, in {elapsed * 1000:.0f} ms")
        say(f"   callers served by another's refresh (coalesced): {after['coalesced'] - status['coalesced']}")
        say(f"   session still alive afterwards: {'yes' if alive else 'NO'}")

        say(f"\n== for comparison: {CLIENTS} clients that each hold the refresh token refresh at once")
        _, grant = post(base + "/o/token/", grant_type="password", username="alice", password="alice-password")
        shared = grant["refresh_token"]
        results = together(CLIENTS, lambda _: post(base + "/o/token/", grant_type="refresh_token", refresh_token=shared))
        ok = [body for code, body in results if code == 200]
        refused = [body for code, body in results if code != 200]
        say(f"   refresh grants the server saw:  {CLIENTS}  ({len(ok)} succeeded, {len(refused)} refused)")
        survivors = 0
        for body in ok:
            code, _ = post(base + "/o/token/", grant_type="refresh_token", refresh_token=body["refresh_token"])
            survivors += code == 200
        say(f"   rotated tokens still usable afterwards: {survivors} of {len(ok)}"
            f" -> {'the session was revoked: every client is logged out' if survivors == 0 else 'session survived'}")
        say("\n== stopping tokend (SIGTERM) and the server")
        tokend.send_signal(signal.SIGTERM)
        say(f"   tokend exited with {tokend.wait(20)}")
    finally:
        for process in processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM) if process is processes[0] else process.terminate()
                except ProcessLookupError:
                    pass
                process.wait(20)
        if not os.environ.get("KEEP_DEMO_DIR"):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
