"""Network position is not lent out (issue 51): a URL a user names reaches only
what the user could reach. In a network namespace the test creates (unshare -n,
with a mount namespace whose /etc/hosts names metadata.tokend.test as
169.254.169.254, on a dummy interface or, where the
kernel has no dummy driver, a veth pair with both ends inside), tokend refuses `tokenctl add` with a
plain-http URL, or with a resource whose challenge, metadata or redirect points
at 169.254.169.254 or the name that resolves there, each with a message that
says so; and a listener on 169.254.169.254 counts no connection.

Every process that could connect anywhere but loopback (tokend, the test's
servers, tokenctl) runs inside the namespace, which has no route out: lo and
the dummy interface are its only links."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import types
from typing import Iterator

import pytest

from conftest import BIN, free_port, wait_for

METADATA = "169.254.169.254"
NAME = "metadata.tokend.test"      # /etc/hosts in the namespace: 169.254.169.254
MAPPED = "mapped.tokend.test"      # ::ffff:169.254.169.254
PUBLIC = "public.tokend.test"      # 93.184.216.34: global, but unreachable here (no route)
USERS = [(4350 + n, 4350 + n) for n in range(3)]  # adding is bounded per person: a few cases each

# Runs as root in the new network and mount namespaces: the links, /etc/hosts, a
# listener on 169.254.169.254 that counts what it accepts, and a resource server
# on loopback whose answers point there. It writes "ready" and serves until killed.
NAMESPACE = r'''
import http.server, json, os, socket, subprocess, sys, threading
workdir, port = sys.argv[1], int(sys.argv[2])
def run(*command):
    subprocess.run(command, check=True)
run("ip", "link", "set", "lo", "up")
# A dummy interface; where the kernel has no dummy driver (built without modules), a veth pair
# whose both ends stay in this namespace: a link that leads nowhere either way.
if subprocess.run(["ip", "link", "add", "meta0", "type", "dummy"], capture_output=True).returncode != 0:
    run("ip", "link", "add", "meta0", "type", "veth", "peer", "name", "meta1")
    run("ip", "link", "set", "meta1", "up")
run("ip", "addr", "add", "169.254.169.254/16", "dev", "meta0")
run("ip", "link", "set", "meta0", "up")
hosts = os.path.join(workdir, "hosts")
with open(hosts, "w") as f:
    f.write("127.0.0.1 localhost\n169.254.169.254 metadata.tokend.test\n"
            "::ffff:169.254.169.254 mapped.tokend.test\n93.184.216.34 public.tokend.test\n")
run("mount", "--bind", hosts, "/etc/hosts")
lock = threading.Lock()
def count(listener):
    while True:
        connection, _ = listener.accept()
        with lock:
            path = os.path.join(workdir, "accepted")
            n = int(open(path).read()) if os.path.exists(path) else 0
            with open(path + ".new", "w") as f:
                f.write(str(n + 1))
            os.replace(path + ".new", path)
        connection.close()
for listen_port in (80, 443):
    listener = socket.create_server(("169.254.169.254", listen_port))
    threading.Thread(target=count, args=(listener,), daemon=True).start()
base = f"http://127.0.0.1:{port}"
ANSWERS = {
    "/challenge-address": (401, {"WWW-Authenticate": 'Bearer resource_metadata="http://169.254.169.254/latest/meta-data/"'}),
    "/challenge-name": (401, {"WWW-Authenticate": 'Bearer resource_metadata="https://metadata.tokend.test/.well-known/oauth-protected-resource"'}),
    "/challenge-mapped": (401, {"WWW-Authenticate": 'Bearer resource_metadata="https://mapped.tokend.test/"'}),
    "/redirect-address": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}),
    "/redirect-name": (307, {"Location": "https://metadata.tokend.test/mcp"}),
    "/issuer-name": (401, {"WWW-Authenticate": f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/issuer-name"'}),
}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(os.path.join(workdir, "served"), "a") as f:
            f.write(self.path + "\n")
        if self.path == "/.well-known/oauth-protected-resource/issuer-name":
            body = json.dumps({"resource": base + "/issuer-name", "authorization_servers": ["https://metadata.tokend.test/"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            status, headers = ANSWERS.get(self.path, (404, {}))
            body = b""
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
open(os.path.join(workdir, "ready"), "w").close()
server.serve_forever()
'''

PROBE = r'''
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
'''


class Namespace:
    """The namespaces' first process (NAMESPACE above); `inside` runs a command in them."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory)
        self.port = free_port()
        self.process = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", sys.executable, "-c", NAMESPACE, directory,
             str(self.port)],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(directory, "namespace.log"), "a"), start_new_session=True)
        wait_for(self._ready, 30, "the network namespace")
        self.prefix = ("nsenter", "-t", str(self.process.pid), "--net", "--mount")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            with open(os.path.join(self.directory, "namespace.log")) as f:
                raise AssertionError(f"the namespace's process exited: {f.read()}")
        return os.path.exists(os.path.join(self.directory, "ready"))

    def inside(self, *command: str, user: tuple[int, int] | None = None) -> subprocess.CompletedProcess[str]:
        as_user = ("setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups") if user else ()
        return subprocess.run([*self.prefix, *as_user, *command], capture_output=True, text=True, timeout=120, cwd="/")

    def accepted(self) -> int:
        path = os.path.join(self.directory, "accepted")
        return int(open(path).read()) if os.path.exists(path) else 0

    def served(self) -> list[str]:
        path = os.path.join(self.directory, "served")
        return open(path).read().split() if os.path.exists(path) else []

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(20)


@pytest.fixture
def namespace(workdir: str) -> Iterator[Namespace]:
    if shutil.which("unshare") is None or shutil.which("nsenter") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and nsenter (util-linux)")
    instance = Namespace(os.path.join(workdir, "ns"))
    yield instance
    instance.stop()


def test_urls_that_would_reach_metadata_or_leave_https_are_refused(namespace: Namespace, make_tokend, workdir: str) -> None:
    # The listener counts what reaches it: this probe from inside the namespace is the one connection it may see.
    probe = namespace.inside(sys.executable, "-c", PROBE, METADATA, "443")
    assert probe.returncode == 0, probe.stderr
    wait_for(lambda: namespace.accepted() == 1, 10, "the listener to count the probe")
    # No route out: the dummy interface's own subnet is the only route.
    routes = namespace.inside("ip", "route", "show").stdout.strip().split("\n")
    assert len(routes) == 1 and routes[0].startswith("169.254.0.0/16 dev meta0"), routes

    os.chmod(workdir, 0o755)
    idle = types.SimpleNamespace(token_url="http://127.0.0.1:9/token", base="http://127.0.0.1:9")
    daemon = make_tokend(idle, daemon={"socket-mode": '"0666"'})
    with open(daemon.config) as f:
        text = f.read()
    users = ", ".join(f'"{user[0]}"' for user in USERS)
    with open(daemon.config, "w") as f:
        # allow-loopback-http: the resource server is on loopback; it does not open anything else.
        f.write(f"[user-sessions]\nusers = [{users}]\nallow-loopback-http = true\n\n" + text)
    daemon.start(prefix=namespace.prefix)

    local = f"http://127.0.0.1:{namespace.port}"
    cases = [
        # (resource URL, what the refusal must say)
        (f"http://{PUBLIC}/mcp", "plain http goes only to loopback, and 93.184.216.34 is a global address"),
        (f"http://{NAME}/mcp", f"{METADATA} is link-local (cloud metadata)"),
        (f"https://{NAME}/mcp", f"{METADATA} is link-local (cloud metadata)"),
        (f"https://{MAPPED}/mcp", f"the IPv4-mapped form of {METADATA}: link-local (cloud metadata)"),
        ("https://2852039166/mcp", f"{METADATA} is link-local (cloud metadata)"),
        (local + "/challenge-address", f"{METADATA} is link-local (cloud metadata)"),
        (local + "/challenge-name", f"{METADATA} is link-local (cloud metadata)"),
        (local + "/challenge-mapped", f"the IPv4-mapped form of {METADATA}"),
        (local + "/redirect-address", f"{METADATA} is link-local (cloud metadata)"),
        (local + "/redirect-name", f"{METADATA} is link-local (cloud metadata)"),
        (local + "/issuer-name", f"{METADATA} is link-local (cloud metadata)"),
    ]
    for index, (resource, said) in enumerate(cases):
        user = USERS[index % len(USERS)]
        added = namespace.inside(os.path.join(BIN, "tokenctl"), "add", f"s{index}", "--resource", resource,
                                 "--socket", daemon.socket, user=user)
        assert added.returncode != 0, (resource, added.stdout)
        assert "tokend does not connect to" in added.stderr and said in added.stderr, (resource, added.stderr)
    # The resource server was asked what it answers; each step it pointed to was refused before a connection.
    assert {"/challenge-address", "/redirect-name", "/.well-known/oauth-protected-resource/issuer-name"} <= set(
        namespace.served())
    assert namespace.accepted() == 1, "tokend connected to 169.254.169.254"
    # Nothing half-added is left.
    listed = namespace.inside(os.path.join(BIN, "tokenctl"), "sessions", "--socket", daemon.socket, user=USERS[0])
    assert listed.returncode == 0 and "s0" not in listed.stdout and "s3" not in listed.stdout, listed


def test_loopback_is_refused_without_allow_loopback_http(namespace: Namespace, make_tokend, workdir: str) -> None:
    os.chmod(workdir, 0o755)
    idle = types.SimpleNamespace(token_url="http://127.0.0.1:9/token", base="http://127.0.0.1:9")
    daemon = make_tokend(idle, daemon={"socket-mode": '"0666"'})
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(f'[user-sessions]\nusers = ["{USERS[0][0]}"]\n\n' + text)
    daemon.start(prefix=namespace.prefix)
    for resource, said in [
        (f"http://127.0.0.1:{namespace.port}/challenge-address", "plain http is not used"),
        (f"https://localhost:{namespace.port}/mcp", "127.0.0.1 is loopback (127.0.0.0/8), and [user-sessions] allow-loopback-http is off"),
    ]:
        added = namespace.inside(os.path.join(BIN, "tokenctl"), "add", "local", "--resource", resource,
                                 "--socket", daemon.socket, user=USERS[0])
        assert added.returncode != 0 and said in added.stderr, (resource, added.stderr)
    assert namespace.served() == [], "tokend connected to the loopback server"
