"""oidc-agent 4.2.6 (Debian oidc-agent-cli), the closest peer, against the
same local authorization server (django-oauth-toolkit with OpenID Connect),
driven by the same load client in its protocol: one plain-JSON request per
connection. The account is created without interaction:
oidc-gen -m --flow=refresh --rt-env --pw-env --prompt=none."""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
REQUEST = '{"request":"access_token","account":"bench","min_valid_period":0}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(path, request):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(json.dumps(request).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            try:
                return json.loads(data)
            except ValueError:
                continue
    return json.loads(data)


def measure(load, directory):
    if not shutil.which("oidc-agent") or not shutil.which("oidc-gen"):
        return {"error": "oidc-agent-cli is not installed (make bench installs it with apt)"}
    version = subprocess.run(["oidc-agent", "--version"], capture_output=True, text=True).stdout.strip()
    work = os.path.join(directory, "oidc")
    os.makedirs(os.path.join(work, "home"))
    port = free_port()
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests", "authserver", "serve.py"),
                               os.path.join(work, "as"), str(port), "--oidc"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    env = dict(os.environ, HOME=os.path.join(work, "home"))
    agent_pid = None
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(work, "as", "ready")):
            if time.time() > deadline:
                return {"version": version, "error": "the OIDC test server did not start"}
            time.sleep(0.2)
        base = f"http://127.0.0.1:{port}/o"
        form = urllib.parse.urlencode({"grant_type": "password", "username": "alice", "password": "alice-password",
                                       "scope": "openid offline_access read"}).encode()
        request = urllib.request.Request(base + "/token/", data=form)
        request.add_header("Authorization", "Basic dG9rZW5kLXRlc3Q6dG9rZW5kLXRlc3Qtc2VjcmV0")
        refresh_token = json.load(urllib.request.urlopen(request, timeout=10))["refresh_token"]
        started = subprocess.run(["oidc-agent"], capture_output=True, text=True, env=env, timeout=30).stdout
        agent_socket = re.search(r"OIDC_SOCK=([^;]+);", started).group(1)
        agent_pid = int(re.search(r"OIDCD_PID=(\d+);", started).group(1))
        env["OIDC_SOCK"] = agent_socket
        generated = subprocess.run(
            ["oidc-gen", "-m", "--flow=refresh", "--rt-env", "--pw-env", "--prompt=none", f"--iss={base}",
             "--client-id=tokend-test", "--client-secret=tokend-test-secret", "--scope=openid offline_access",
             "--redirect-uri=http://localhost:8080", "bench"],
            capture_output=True, text=True, timeout=60,
            env=dict(env, OIDC_REFRESH_TOKEN=refresh_token, OIDC_ENCRYPTION_PW="bench-password"))
        if generated.returncode != 0:
            return {"version": version, "error": f"oidc-gen failed: {generated.stderr.strip()[:200]}"}
        assert ask(agent_socket, json.loads(REQUEST))["status"] == "success"

        def oneshot(count, clients):
            result = subprocess.run([load, "oneshot", agent_socket, str(count), str(clients), REQUEST],
                                    capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise RuntimeError(result.stderr)
            return json.loads(result.stdout)

        oneshot(500, 1)  # warm up
        figures = {"version": version, "clients_1": oneshot(5000, 1), "clients_16": oneshot(16000, 16)}
        rotations = []
        for _ in range(5):
            t0 = time.monotonic()
            answer = ask(agent_socket, {"request": "access_token", "account": "bench", "min_valid_period": 10 ** 6})
            rotations.append((time.monotonic() - t0) * 1000)
            assert answer["status"] == "success", answer
        figures["rotation_ms"] = statistics.median(rotations)
        return figures
    except Exception as error:  # report, do not hide, what could not be automated
        return {"version": version, "error": f"{type(error).__name__}: {str(error)[:200]}"}
    finally:
        if agent_pid:
            try:
                os.kill(agent_pid, 15)
            except ProcessLookupError:
                pass
        os.killpg(server.pid, 15)
        server.wait(10)
