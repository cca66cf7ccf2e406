"""tokend is all four programs, by the name it runs as (issue 55, docs/packaging.md): the package
installs /usr/sbin/tokend once and tokenctl, tokend-proxy and tokend-native-host as links to it.
Here the links are in a directory of the test's own, to the built tokend, and each is used for
what its program does: the daemon serves, tokenctl logs in and gets the token, the native host
relays the extension's call, the proxy puts the token on a request, and `tokenctl browser-bridge`
registers the host beside the link it was started by; another name is refused."""
import http.server
import json
import os
import socket
import struct
import subprocess
import threading
import urllib.request

from conftest import BIN, wait_for

EXTENSION = "chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/"


def links(workdir):
    directory = os.path.join(workdir, "bin")
    os.makedirs(directory)
    for name in ("tokend", "tokenctl", "tokend-proxy", "tokend-native-host"):
        os.symlink(os.path.join(BIN, "tokend"), os.path.join(directory, name))
    return directory


class Upstream(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):
        Upstream.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_name_runs_its_program(server, make_tokend, workdir):
    here = links(workdir)
    daemon = make_tokend(server)
    daemon.log = open(daemon.log_path, "a")
    daemon.process = subprocess.Popen([os.path.join(here, "tokend"), "--config", daemon.config],
                                      stdout=daemon.log, stderr=daemon.log)
    wait_for(daemon._connectable, 20, "tokend, started by its link, on its socket")

    def ctl(*args, input=None):
        return subprocess.run([os.path.join(here, "tokenctl"), args[0], "--socket", daemon.socket, *args[1:]],
                              input=input, capture_output=True, text=True, timeout=60)

    status, grant = server.password_grant()
    assert status == 200, grant
    assert ctl("login", input=grant["refresh_token"] + "\n").returncode == 0
    token = ctl("token")
    assert token.returncode == 0 and token.stdout.strip() == daemon.call("io.tokend.Broker.GetToken")[1][
        "parameters"]["token"]["accessToken"], token.stderr

    # The native host: one framed call relayed to tokend, framed answer back.
    body = json.dumps({"id": 1, "method": "GetStatus", "parameters": {}}).encode()
    host = subprocess.Popen([os.path.join(here, "tokend-native-host"), EXTENSION], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, TOKEND_SOCKET=daemon.socket))
    host.stdin.write(struct.pack("=I", len(body)) + body)
    host.stdin.flush()
    length = struct.unpack("=I", host.stdout.read(4))[0]
    answer = json.loads(host.stdout.read(length))
    assert answer["id"] == 1 and "status" in answer["parameters"], answer
    host.stdin.close()
    assert host.wait(10) == 0

    # The proxy: a request to the upstream carries the session's token.
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    proxy = subprocess.Popen([os.path.join(here, "tokend-proxy"), "--socket", daemon.socket,
                              "--listen", f"tcp:127.0.0.1:{port}",
                              "--upstream", f"http://127.0.0.1:{upstream.server_address[1]}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def answered():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5).read() == b"ok"
            except OSError:
                assert proxy.poll() is None, proxy.stderr.read()
                return False
        wait_for(answered, 20, "the proxy, started by its link, answering")
        assert Upstream.seen[-1] == "Bearer " + token.stdout.strip()
    finally:
        proxy.terminate()
        proxy.wait(10)
        upstream.shutdown()

    # browser-bridge names the host beside the link tokenctl was started by, not beside the file it runs.
    profile = os.path.join(workdir, "profile")
    registered = subprocess.run([os.path.join(here, "tokenctl"), "browser-bridge", "--user-data-dir", profile],
                                capture_output=True, text=True, timeout=30)
    assert registered.returncode == 0, registered.stderr
    with open(os.path.join(profile, "NativeMessagingHosts", "io.tokend.bridge.json")) as f:
        assert json.load(f)["path"] == os.path.join(here, "tokend-native-host")


def test_help_names_the_program_it_runs_as(workdir):
    here = links(workdir)
    says = {name: subprocess.run([os.path.join(here, name), "--help"], capture_output=True, text=True, timeout=30)
            for name in ("tokend", "tokenctl", "tokend-proxy")}
    for name, run in says.items():
        assert run.returncode == 0 and f"USAGE: {name} " in run.stdout, (name, run.stdout[:300])
    host = subprocess.run([os.path.join(here, "tokend-native-host"), "--help"], capture_output=True, text=True,
                          timeout=30)
    assert host.returncode == 0 and "USAGE: tokend-native-host" in host.stdout
    # Another name is refused with the four it answers to (exit 64, EX_USAGE), not taken for the daemon.
    os.symlink(os.path.join(BIN, "tokend"), os.path.join(here, "tctl"))
    other = subprocess.run([os.path.join(here, "tctl"), "--help"], capture_output=True, text=True, timeout=30)
    assert other.returncode == 64 and other.stdout == "", other.stdout
    assert "started as 'tctl'" in other.stderr and "tokend-native-host" in other.stderr, other.stderr
    # A login shell's '-' before the name is not part of it.
    dashed = subprocess.run(["-tokenctl", "--version"], executable=os.path.join(here, "tokenctl"),
                            capture_output=True, text=True, timeout=30)
    assert dashed.returncode == 0 and dashed.stdout.strip(), dashed.stderr


def test_browser_bridge_started_by_a_relative_path_names_an_absolute_host(workdir):
    """A browser's host manifest must name an absolute path: tokenctl started as ./bin/tokenctl
    (outside review of issue 55) writes the host beside it, made absolute."""
    links(workdir)
    profile = os.path.join(workdir, "profile")
    registered = subprocess.run(["./bin/tokenctl", "browser-bridge", "--user-data-dir", profile], cwd=workdir,
                                capture_output=True, text=True, timeout=30)
    assert registered.returncode == 0, registered.stderr
    with open(os.path.join(profile, "NativeMessagingHosts", "io.tokend.bridge.json")) as f:
        path = json.load(f)["path"]
    assert os.path.isabs(path) and os.path.samefile(path, os.path.join(workdir, "bin", "tokend-native-host")), path
