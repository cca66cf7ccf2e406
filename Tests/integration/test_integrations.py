"""The tools people already use get their tokens from tokend: real git over
smart HTTP (credential helper), real kubectl (exec credential plugin),
`tokenctl exec` (BEARER_TOKEN) and token files (BEARER_TOKEN_FILE)."""
import concurrent.futures
import datetime
import http.server
import json
import os
import shutil
import sqlite3
import ssl
import stat
import subprocess
import threading

import pytest

from conftest import BIN, CLIENT_ID, CLIENT_SECRET, login, wait_for
from gitserver import GitServer

B = "io.tokend.Broker."
TOKENCTL = os.path.join(BIN, "tokenctl")


def git(home, *args, cwd=None):
    env = dict(os.environ, HOME=home, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false")
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def git_setup(server, make_tokend, workdir):
    root = os.path.join(workdir, "repos")
    os.makedirs(root)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", os.path.join(root, "project.git")], check=True)
    subprocess.run(["git", "-C", os.path.join(root, "project.git"), "config", "http.receivepack", "true"], check=True)
    gitserver = GitServer(root, server.base + "/o/introspect/", CLIENT_ID, CLIENT_SECRET)
    daemon = make_tokend(server, **{"git-hosts": json.dumps([gitserver.host]), "git-username": '"x-access-token"'})
    daemon.start()
    login(daemon, server)
    home = os.path.join(workdir, "home")
    os.makedirs(home)
    git(home, "config", "--global", "credential.helper", f"!{TOKENCTL} git-credential --socket {daemon.socket}")
    git(home, "config", "--global", "user.email", "alice@example.test")
    git(home, "config", "--global", "user.name", "alice")
    yield gitserver, daemon, home
    gitserver.stop()


def test_git_clones_and_pushes_with_the_session_token(git_setup, workdir):
    gitserver, daemon, home = git_setup
    work = os.path.join(workdir, "work")
    result = git(home, "clone", gitserver.url("project.git"), work)
    assert result.returncode == 0, result.stderr
    with open(os.path.join(work, "README"), "w") as f:
        f.write("hello\n")
    git(home, "add", "README", cwd=work)
    git(home, "commit", "-qm", "first", cwd=work)
    pushed = git(home, "push", "origin", "HEAD:main", cwd=work)
    assert pushed.returncode == 0, pushed.stderr
    listed = git(home, "ls-remote", gitserver.url("project.git"))
    assert "refs/heads/main" in listed.stdout
    assert "refused" not in gitserver.log and gitserver.log.count("ok") >= 3
    # The helper answers only for git-hosts: another host falls through to the next helper (empty answer).
    other = subprocess.run([TOKENCTL, "git-credential", "--socket", daemon.socket, "get"],
                           input="protocol=https\nhost=elsewhere.example\n\n", capture_output=True, text=True)
    assert other.returncode == 0 and other.stdout == ""
    mine = subprocess.run([TOKENCTL, "git-credential", "--socket", daemon.socket, "get"],
                          input=f"protocol=http\nhost={gitserver.host}\n\n", capture_output=True, text=True)
    token = daemon.call(B + "GetToken")[1]["parameters"]["token"]
    assert mine.stdout.splitlines() == [
        "username=x-access-token", f"password={token['accessToken']}", f"password_expiry_utc={token['expiresAt']}"]
    bearer = subprocess.run([TOKENCTL, "git-credential", "--socket", daemon.socket, "get"],
                            input=f"capability[]=authtype\nprotocol=http\nhost={gitserver.host}\n\n",
                            capture_output=True, text=True)
    assert bearer.stdout.splitlines()[:4] == [
        "capability[]=authtype", "authtype=Bearer", f"credential={token['accessToken']}", "ephemeral=true"]


def test_twenty_gits_hitting_a_revoked_token_cause_one_refresh(git_setup, server):
    """The server stops accepting the access token: 20 concurrent git processes get
    401, each erases the token (compare-and-refresh), and tokend refreshes
    once; the retries all succeed with the new token."""
    gitserver, daemon, home = git_setup
    assert git(home, "ls-remote", gitserver.url("project.git")).returncode == 0
    token = daemon.call(B + "GetToken")[1]["parameters"]["token"]
    # The server stops accepting the access token. (django-oauth-toolkit's RFC 7009 revocation of an
    # access token also spends its refresh token, which would end the session: expire it instead.)
    db = sqlite3.connect(os.path.join(server.directory, "db.sqlite3"), timeout=30)
    with db:
        changed = db.execute("update oauth2_provider_accesstoken set expires = '2000-01-01 00:00:00' where token = ?",
                             (token["accessToken"],)).rowcount
    assert changed == 1
    refreshes_before = len(server.grants("refresh_token"))
    gitserver.hold_refusals(20)  # all 20 get their 401 together, before any of them erases
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        first = list(pool.map(lambda _: git(home, "ls-remote", gitserver.url("project.git")), range(20)))
    gitserver.barrier = None
    assert all(r.returncode != 0 for r in first), "the revoked token was accepted"
    assert gitserver.log.count("refused") >= 20
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        retries = list(pool.map(lambda _: git(home, "ls-remote", gitserver.url("project.git")), range(20)))
    assert all(r.returncode == 0 for r in retries), [r.stderr for r in retries if r.returncode]
    assert len(server.grants("refresh_token")) - refreshes_before == 1
    assert daemon.call(B + "GetToken")[1]["parameters"]["token"]["generation"] == token["generation"] + 1


class KubeAPI:
    """A loopback HTTPS endpoint that answers /api only to the session's current token."""

    def __init__(self, directory, daemon):
        self.cert, self.key = os.path.join(directory, "api.crt"), os.path.join(directory, "api.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key, "-out",
                        self.cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        self.seen = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                current = daemon.call(B + "GetToken")[1]["parameters"]["token"]["accessToken"]
                authorized = self.headers.get("Authorization") == f"Bearer {current}"
                outer.seen.append(authorized)
                body = json.dumps({"kind": "APIVersions", "versions": ["v1"]} if authorized else
                                  {"kind": "Status", "code": 401}).encode()
                self.send_response(200 if authorized else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (Debian kubernetes-client) is needed")
def test_kubectl_gets_its_token_from_the_exec_plugin(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    api = KubeAPI(workdir, daemon)
    try:
        kubeconfig = os.path.join(workdir, "kubeconfig")
        with open(kubeconfig, "w") as f:
            json.dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": api.cert}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "me"}}],
                "users": [{"name": "me", "user": {"exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1", "command": TOKENCTL,
                    "args": ["kube-credential", "--socket", daemon.socket]}}}],
            }, f)
        result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "--raw", "/api"],
                                capture_output=True, text=True, timeout=60, env=dict(os.environ, HOME=workdir))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["kind"] == "APIVersions"
        assert api.seen and all(api.seen)
        # The plugin's output is an ExecCredential of the version asked for.
        for version in ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"):
            info = json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False}})
            out = subprocess.run([TOKENCTL, "kube-credential", "--socket", daemon.socket], capture_output=True,
                                 text=True, env=dict(os.environ, KUBERNETES_EXEC_INFO=info)).stdout
            credential = json.loads(out)
            token = daemon.call(B + "GetToken")[1]["parameters"]["token"]
            assert credential["apiVersion"] == version and credential["kind"] == "ExecCredential"
            assert credential["status"]["token"] == token["accessToken"]
            expiry = datetime.datetime.strptime(credential["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            assert int(expiry.replace(tzinfo=datetime.timezone.utc).timestamp()) == token["expiresAt"]
    finally:
        api.server.shutdown()


def test_exec_sets_bearer_token(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    result = subprocess.run([TOKENCTL, "exec", "--socket", daemon.socket, "--", "sh", "-c", 'printf %s "$BEARER_TOKEN"'],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == daemon.call(B + "GetToken")[1]["parameters"]["token"]["accessToken"]
    missing = subprocess.run([TOKENCTL, "exec", "--socket", daemon.socket, "--", "/nonexistent/program"],
                             capture_output=True, text=True)
    assert missing.returncode == 127 and "cannot run" in missing.stderr


def test_token_files_follow_every_refresh(server, make_tokend, workdir):
    runtime = os.path.join(workdir, "run")
    daemon = make_tokend(
        server, daemon={"runtime-directory": json.dumps(runtime)},
        **{"token-files": '[{ path = "app/token", group = "0", mode = "0640" }, { path = "private" }]'})
    daemon.start()
    shared, private = os.path.join(runtime, "app", "token"), os.path.join(runtime, "private")
    assert not os.path.exists(shared)
    refresh_token = login(daemon, server)

    def current():
        return daemon.call(B + "GetToken")[1]["parameters"]["token"]["accessToken"] + "\n"
    # Token files follow the state file on its write queue: wait for both.
    wait_for(lambda: os.path.exists(private) and os.path.exists(shared) and open(shared).read() == current(), 5,
             "the token files")
    info = os.stat(shared)
    assert stat.S_IMODE(info.st_mode) == 0o640 and info.st_gid == 0
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert daemon.ctl("refresh").returncode == 0
    wait_for(lambda: open(shared).read() == current(), 5, "the refreshed token in the file")
    for path in (shared, private):
        assert refresh_token not in open(path).read()
    assert not [n for n in os.listdir(os.path.dirname(shared)) if n.endswith(".tmp")]
    assert daemon.ctl("logout", "--no-revoke").returncode == 0
    wait_for(lambda: not os.path.exists(shared) and not os.path.exists(private), 5, "files removed at logout")
