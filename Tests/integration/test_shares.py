# Over 90 s of `make test` (docs/testing.md): each share test starts a tokend and a provider of its own and
# acts as other users (setpriv), one through a real OpenSSH server and one from a rootless container's user
# namespace; TTL tests wait for a share's end (146 s summed on the busy 2-core machine).
"""Shares (issue 44): a socket tokenctl binds with the asker's rights and hands
to tokend (SCM_RIGHTS), which serves it with token calls only, made as the
creator. Other users are simulated with setpriv (numeric uid and gid); the
token a caller received is shown good by the provider's introspection."""
import array
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from conftest import BIN, free_port, login, read_frame, wait_for
from resources import introspect, mode_server, password_grant
from resources import mode  # noqa: F401 (fixture)

B = "io.tokend.Broker."
CREATOR = (4300, 4300)  # may read the session
NOBODY = (4242, 4242)  # may do nothing at all
OTHER = (4301, 4301)  # another reader


@pytest.fixture(autouse=True)
def setpriv_is_installed() -> None:
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv is missing: apt install util-linux (these tests act as other users with it)")


def start(make_tokend, server, workdir, access=f'read-users = ["{CREATOR[0]}", "{OTHER[0]}"]\nread-groups = []',
          **session):
    """A logged-in tokend whose socket other users can reach, with `access` as its [access] table."""
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}, **session)
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write("[access]\n" + access + "\n" + text)
    daemon.start()
    login(daemon, server)
    return daemon


def home(workdir, user):
    """A directory of `user`'s own, others may enter (where its shares are made)."""
    path = os.path.join(workdir, f"u{user[0]}")
    os.makedirs(path, exist_ok=True)
    os.chown(path, *user)
    os.chmod(path, 0o755)
    return path


def ctl_as(user, daemon, *args, cwd=None, socket_path=None):
    """tokenctl run as `user`; `socket_path`: a share's socket instead of tokend's."""
    command = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
               os.path.join(BIN, "tokenctl"), *args[:1], "--socket", socket_path or daemon.socket, *args[1:]]
    if args[0] == "share":  # share's subcommand comes before the options
        command = command[:5] + ["share", args[1], "--socket", socket_path or daemon.socket, *args[2:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd)


def call_as(user, socket_at, method, more=False, **parameters):
    """One raw Varlink call made by `user` on the socket at `socket_at`; the (first) reply."""
    program = ("import json,socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
               "s.sendall(sys.argv[2].encode()+b'\\0'); data=b''\n"
               "while not data.endswith(b'\\0'):\n"
               "    chunk=s.recv(65536)\n"
               "    if not chunk: break\n"
               "    data+=chunk\n"
               "print(data[:-1].decode() if data else '{\"closed\":true}')")
    message = json.dumps({"method": B + method, "parameters": parameters, **({"more": True} if more else {})})
    result = subprocess.run(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
                             "/usr/bin/python3", "-c", program, socket_at, message],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def active(server, token):
    status, answer = server.post("/o/introspect/", token=token)
    return status == 200 and answer.get("active") is True


def listed(daemon, user):
    result = ctl_as(user, daemon, "share", "list", "--json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def hold(path):
    """A connection through a share that stays open: a subscription, its first event read."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(json.dumps({"method": B + "Subscribe", "parameters": {}, "more": True}).encode() + b"\0")
    first = json.loads(read_frame(s))
    assert first["parameters"]["event"] == "status", first
    assert "version" not in first["parameters"], "a share's events carry no cookie jar version"
    return s


def closed_within(s, seconds):
    """Seconds until the peer closed `s` (it must within `seconds`)."""
    started = time.monotonic()
    s.settimeout(seconds)
    while True:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
    return time.monotonic() - started


def test_a_stranger_cannot_make_a_share_and_leaves_no_file(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    directory = home(workdir, NOBODY)
    path = os.path.join(directory, "s.sock")
    result = ctl_as(NOBODY, daemon, "share", "create", path)
    assert result.returncode == 6, (result.returncode, result.stderr)
    assert not os.path.lexists(path), "the refused share's socket file is gone"
    assert os.listdir(directory) == []
    assert listed(daemon, (0, 0)) == [], "root sees every share: there is none"


def test_through_a_share_a_user_with_no_rights_gets_a_token_and_nothing_else(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    made = ctl_as(CREATOR, daemon, "share", "create", path, "--mode", "0666", "--ttl", "10m")
    assert made.returncode == 0, made.stderr
    assert "warning: mode 666" in made.stderr
    info = os.lstat(path)
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (CREATOR[0], "0o666"), "the file is the creator's, as asked"
    # tokend's own socket refuses the stranger; the share answers it.
    assert call_as(NOBODY, daemon.socket, "GetToken").get("error") == "org.varlink.service.PermissionDenied"
    token = ctl_as(NOBODY, daemon, "token", socket_path=path)
    assert token.returncode == 0, token.stderr
    assert active(server, token.stdout.strip()), "the provider accepts the token got through the share"
    reply = call_as(NOBODY, path, "Refresh", staleGeneration=0)
    assert "error" not in reply and reply["parameters"]["token"]["accessToken"], reply
    # Nothing else: status, sessions, cookies, logout, login, more shares, another session.
    for method, parameters in [("GetStatus", {}), ("ListSessions", {}), ("GetCookies", {"url": "https://a.test/"}),
                               ("ExportCookies", {}), ("Logout", {}), ("GetMetrics", {}), ("ListShares", {}),
                               ("CreateShare", {"path": path}), ("RevokeShare", {"path": path}),
                               ("GetToken", {"session": "other"}), ("GetToken", {"resource": "https://x.test/"}),
                               ("GetToken", {"scope": "write"}), ("Subscribe", {"sinceVersion": 0})]:
        reply = call_as(NOBODY, path, method, more=method == "Subscribe", **parameters)
        assert reply.get("error") == "org.varlink.service.PermissionDenied", (method, parameters, reply)
    assert "share call refused" in daemon.logs()
    shares = listed(daemon, CREATOR)
    assert [(s["path"], s["session"], s["mode"]) for s in shares] == [(path, "default", "0666")], shares
    assert listed(daemon, OTHER) == [], "another reader does not see it"
    assert ctl_as(OTHER, daemon, "share", "revoke", path).returncode == 1, "nor end it"


def test_a_share_is_listed_and_revoke_ends_it_with_its_connections(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    assert ctl_as(CREATOR, daemon, "share", "create", path).returncode == 0
    held = [hold(path) for _ in range(3)]
    wait_for(lambda: listed(daemon, CREATOR)[0]["connections"] == 3, 10, "three connections listed")
    # Another user cannot revoke it; the creator can.
    other = ctl_as(OTHER, daemon, "share", "revoke", path)
    assert other.returncode == 1 and "no share" in other.stderr and os.path.exists(path)
    revoked = ctl_as(CREATOR, daemon, "share", "revoke", path)
    assert revoked.returncode == 0, revoked.stderr
    took = [closed_within(s, 5) for s in held]
    assert max(took) < 1.0, f"every connection closed within a second: {took}"
    assert not os.path.lexists(path), "revoke removes the socket file"
    assert listed(daemon, CREATOR) == []
    again = ctl_as(CREATOR, daemon, "share", "revoke", path)
    assert again.returncode == 1 and "no share" in again.stderr



def test_a_share_whose_file_was_removed_is_ended_by_revoke_and_not_shadowed(server, make_tokend, workdir):
    """The outside review's case: a share's file removed (rm, a cleaner) while a connection holds it;
    another share at the same path would make revoke end the wrong one."""
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    assert ctl_as(CREATOR, daemon, "share", "create", path).returncode == 0
    held = hold(path)
    os.unlink(path)
    second = ctl_as(CREATOR, daemon, "share", "create", path)
    assert second.returncode != 0 and "still live" in second.stderr, second.stderr
    assert not os.path.lexists(path), "the refused share left no file"
    revoked = ctl_as(CREATOR, daemon, "share", "revoke", path)
    assert revoked.returncode == 0, revoked.stderr
    assert closed_within(held, 5) < 1.0, "the share still in use ended with its connection"
    assert listed(daemon, CREATOR) == []
    assert ctl_as(CREATOR, daemon, "share", "create", path).returncode == 0, "the path is free again"

def test_a_share_ends_at_its_ttl_with_its_connections(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    made = ctl_as(CREATOR, daemon, "share", "create", path, "--ttl", "3s")
    assert made.returncode == 0, made.stderr
    held = hold(path)
    assert closed_within(held, 15) < 15
    wait_for(lambda: "share ended" in daemon.logs() and "reason=expired" in daemon.logs(), 5, "expiry logged")
    ended = time.monotonic()
    with socket.socket(socket.AF_UNIX) as s:
        with pytest.raises(ConnectionRefusedError):
            s.connect(path)  # the file is the asker's and stays; nobody listens
    assert listed(daemon, CREATOR) == []
    assert time.monotonic() - ended < 5


def test_path_rules_each_with_a_clear_error_and_no_file_left(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    directory = home(workdir, CREATOR)
    existing = os.path.join(directory, "taken")
    with open(existing, "w") as f:
        f.write("keep")
    os.chown(existing, *CREATOR)
    result = ctl_as(CREATOR, daemon, "share", "create", existing)
    assert result.returncode == 1 and "does not replace" in result.stderr, result.stderr
    assert open(existing).read() == "keep"
    target = os.path.join(directory, "target")
    link = os.path.join(directory, "link")
    os.symlink(target, link)
    result = ctl_as(CREATOR, daemon, "share", "create", link)
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert not os.path.lexists(target), "the link was not followed"
    long = os.path.join(directory, "x" * 120)
    result = ctl_as(CREATOR, daemon, "share", "create", long)
    assert result.returncode == 1 and "socket address holds at most 107" in result.stderr, result.stderr
    assert ctl_as(CREATOR, daemon, "share", "create", "p.sock", "--ttl", "31d").returncode == 64
    assert ctl_as(CREATOR, daemon, "share", "create", "p.sock", "--mode", "0400").returncode == 64
    # A relative path is the caller's directory's.
    made = ctl_as(CREATOR, daemon, "share", "create", "rel.sock", "--ttl", "90", cwd=directory)
    assert made.returncode == 0, made.stderr
    assert [s["path"] for s in listed(daemon, CREATOR)] == [os.path.join(directory, "rel.sock")]
    assert sorted(os.listdir(directory)) == ["link", "rel.sock", "taken"]


def raw_create(path_asked, fds, socket_path):
    """CreateShare sent with `fds` (SCM_RIGHTS) in one sendmsg, after
    ExpectDescriptor (tokend's connections take descriptors only then); the reply."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(socket_path)
        s.sendall(json.dumps({"method": B + "ExpectDescriptor", "parameters": {}}).encode() + b"\0")
        assert json.loads(read_frame(s)) == {"parameters": {}}
        message = json.dumps({"method": B + "CreateShare", "parameters": {"path": path_asked}}).encode() + b"\0"
        s.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
        return json.loads(read_frame(s))


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_descriptor_is_checked_and_extra_ones_are_never_kept(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir, access='read-groups = ["0"]')
    listener = socket.socket(socket.AF_UNIX)
    elsewhere = os.path.join(workdir, "elsewhere.sock")
    listener.bind(elsewhere)
    listener.listen()
    reply = raw_create(os.path.join(workdir, "asked.sock"), [listener.fileno()], daemon.socket)
    assert reply["error"] == B + "ShareRefused" and "bound at" in reply["parameters"]["reason"], reply
    assert raw_create(elsewhere, [], daemon.socket)["parameters"]["reason"].startswith("no listening socket")
    with open(daemon.config) as f:
        reply = raw_create(elsewhere, [f.fileno()], daemon.socket)
    assert reply["parameters"]["reason"] == "the descriptor passed is not a socket", reply
    unlistened = socket.socket(socket.AF_UNIX)
    unlistened.bind(os.path.join(workdir, "quiet.sock"))
    reply = raw_create(os.path.join(workdir, "quiet.sock"), [unlistened.fileno()], daemon.socket)
    assert reply["parameters"]["reason"] == "the socket passed is not listening", reply
    # Many calls, each with descriptors it does not take, or more than one: tokend keeps none.
    # Not asked for (no ExpectDescriptor), the kernel refuses them (SO_PASSRIGHTS, Linux 6.16+).
    before = open_descriptors(daemon.process.pid)
    for _ in range(50):
        a, b = socket.socketpair()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(daemon.socket)
            s.sendall(json.dumps({"method": B + "ExpectDescriptor", "parameters": {}}).encode() + b"\0")
            assert json.loads(read_frame(s)) == {"parameters": {}}
            frame = json.dumps({"method": B + "GetStatus", "parameters": {}}).encode() + b"\0"
            s.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno(), b.fileno()]))])
            assert "error" not in json.loads(read_frame(s))
            with pytest.raises(PermissionError):
                s.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
        a.close()
        b.close()
    wait_for(lambda: open_descriptors(daemon.process.pid) <= before, 10, "no descriptor kept of 100 passed")
    reply = raw_create(elsewhere, [listener.fileno(), listener.fileno()], daemon.socket)
    assert reply.get("error") is None, "the first of two descriptors is the call's; the other is closed"
    listener.close()
    served = call_as((0, 0), elsewhere, "GetToken")
    assert served["parameters"]["token"]["accessToken"], served
    assert varlink(daemon.socket, "RevokeShare", path=elsewhere).get("error") is None
    wait_for(lambda: open_descriptors(daemon.process.pid) <= before, 10, "the share's descriptor closed, no other kept")


def varlink(socket_at, method, **parameters):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(socket_at)
        s.sendall(json.dumps({"method": B + method, "parameters": parameters}).encode() + b"\0")
        return json.loads(read_frame(s))


ADMIN, MAIL = "https://admin.api.test/", "https://mail.api.test/"


@pytest.fixture
def resource_server(workdir, mode):
    instance = mode_server(os.path.join(workdir, "as"), mode)
    yield instance
    instance.stop()


def test_a_share_never_gives_a_resource_its_creator_may_not_have(resource_server, make_tokend, workdir, mode):
    """resource-access keeps the admin API to root: the creator (a reader) cannot share it, and what comes
    through its share of the mail API is checked as the creator by the audience rule: introspection shows
    no token covering the admin API ever leaves (under shared-audience, one token covers both: none leaves)."""
    server = resource_server
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}, scope='"read write"',
                         resources=json.dumps([ADMIN, MAIL]),
                         **{"introspection-endpoint": json.dumps(server.base + "/o/introspect/"),
                            "resource-access": '{ "%s" = { read-users = ["0"] } }' % ADMIN})
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(f'[access]\nread-users = ["{CREATOR[0]}"]\nread-groups = []\n' + text)
    daemon.start()
    status, grant = password_grant(server, [ADMIN, MAIL], "read write")
    assert status == 200, grant
    assert "error" not in daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
    directory = home(workdir, CREATOR)
    refused = ctl_as(CREATOR, daemon, "share", "create", os.path.join(directory, "admin.sock"), "--resource", ADMIN)
    assert refused.returncode == 6 and "may not have tokens for " + ADMIN in refused.stderr, refused.stderr
    assert os.listdir(directory) == [], "the refused share left no file"
    mail = os.path.join(directory, "mail.sock")
    made = ctl_as(CREATOR, daemon, "share", "create", mail, "--resource", MAIL, "--mode", "0666")
    received = []
    if made.returncode == 0:
        for method, parameters in [("GetToken", {}), ("GetToken", {"resource": MAIL}), ("Refresh", {"staleGeneration": 0})]:
            reply = call_as(NOBODY, mail, method, **parameters)
            if "error" in reply:
                assert reply["error"] == B + "ResourceNotAllowed" and reply["parameters"]["resource"] == ADMIN, reply
                continue
            answer = introspect(server, reply["parameters"]["token"]["accessToken"])
            assert answer.get("active"), answer
            received.append(answer.get("aud") or [])
    else:
        assert made.returncode == 6 and ADMIN in made.stderr, made.stderr  # shared-audience already learnt
    assert all(ADMIN not in aud for aud in received), received
    if mode == "keep-wide":
        assert made.returncode == 0, made.stderr
        assert received and all(aud == [MAIL] for aud in received), received
    else:
        assert received == [], "under shared-audience the mail API's token covers the admin API: none leaves"
    # root may have both, and shares the admin API.
    assert ctl_as((0, 0), daemon, "share", "create", os.path.join(workdir, "root.sock"), "--resource", ADMIN).returncode == 0


# ssh -R: a share reached from a remote shell. A test-owned OpenSSH server on
# loopback (its own host key, config and authorized key) stands for the remote
# host; the remote command runs as a uid with no rights in tokend at all.

SSHD = "/usr/sbin/sshd"
SHARER = (65534, 65534)  # the share's creator runs ssh: ssh needs a passwd entry (nobody)


@pytest.fixture
def sshd(workdir):
    if not os.path.exists(SSHD):
        pytest.fail("needs Debian's openssh-server: `make deps` installs it")
    directory = os.path.join(workdir, "ssh")
    os.makedirs(directory)
    os.chmod(directory, 0o755)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(directory, "host")], check=True)
    client_key = os.path.join(directory, "client")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", client_key], check=True)
    os.chown(client_key, *SHARER)
    shutil.copy(client_key + ".pub", os.path.join(directory, "authorized_keys"))
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    port = free_port()
    config = os.path.join(directory, "sshd_config")
    with open(config, "w") as f:
        f.write("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {directory}/host",
            f"AuthorizedKeysFile {directory}/authorized_keys", f"PidFile {directory}/sshd.pid",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "AllowStreamLocalForwarding yes",
            # The forwarded socket is made 0666 so that the remote command's uid can open it.
            "StreamLocalBindMask 0111", "LogLevel VERBOSE", ""]))
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", config], stderr=open(os.path.join(directory, "sshd.log"), "w"))

    def listening():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_for(listening, 20, "sshd listening")
    yield port, client_key
    process.terminate()
    process.wait(10)


def test_a_share_through_ssh_remote_forwarding(server, make_tokend, workdir, sshd):
    port, key = sshd
    daemon = start(make_tokend, server, workdir, access=f'read-users = ["{SHARER[0]}"]\nread-groups = []')
    share = os.path.join(home(workdir, SHARER), "share.sock")
    made = ctl_as(SHARER, daemon, "share", "create", share, "--ttl", "5m")
    assert made.returncode == 0, made.stderr
    remote = os.path.join(workdir, "remote-tokend.sock")
    tokenctl = os.path.join(BIN, "tokenctl")
    # On the "remote host": a user tokend refuses outright, with TOKEND_SOCKET at the forwarded socket.
    command = (f"TOKEND_SOCKET={remote} setpriv --reuid={NOBODY[0]} --regid={NOBODY[1]} --clear-groups "
               f"{tokenctl} token; echo refused-here: $(setpriv --reuid={NOBODY[0]} --regid={NOBODY[1]} "
               f"--clear-groups {tokenctl} token --socket {daemon.socket} >/dev/null 2>&1; echo $?)")
    result = subprocess.run(
        ["setpriv", f"--reuid={SHARER[0]}", f"--regid={SHARER[1]}", "--clear-groups",
         "ssh", "-F", "/dev/null", "-i", key, "-p", str(port), "-o", "UserKnownHostsFile=/dev/null",
         "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
         "-o", "LogLevel=ERROR", "-R", f"{remote}:{share}", "root@127.0.0.1", command],
        capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"], "HOME": "/tmp"})
    assert result.returncode == 0, (result.stdout, result.stderr, open(os.path.join(workdir, "ssh", "sshd.log")).read())
    token, refused = result.stdout.strip().splitlines()
    assert active(server, token), "the remote side's token, got through ssh and the share, is one the provider accepts"
    assert refused == "refused-here: 6", "the same uid on tokend's own socket is refused"
    info = os.lstat(remote)
    assert stat.S_ISSOCK(info.st_mode) and info.st_uid == 0, "TOKEND_SOCKET was sshd's forwarded socket, made for root"


# A rootless container: a user namespace (newuidmap, /etc/subuid) with a
# mount namespace into which the share's directory is bind-mounted. Its
# process runs as inner uid 1, a subordinate uid of the share's creator.

RANGE_START, RANGE_COUNT = 310000, 100

CONTAINER = r"""
import ctypes, os, subprocess, sys
share_dir, mount_at, tokenctl, main_socket, start = sys.argv[1:6]
libc = ctypes.CDLL(None, use_errno=True)
ready_r, ready_w = os.pipe()
mapper = os.fork()
if mapper == 0:  # outside the namespace: maps it once the parent has entered it
    os.read(ready_r, 1)
    os._exit(subprocess.run(["newuidmap", str(os.getppid()), "0", str(os.getuid()), "1", "1", start, "10"]).returncode)
if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
    sys.exit(f"unshare: errno {ctypes.get_errno()}")
os.write(ready_w, b"x")
if os.waitpid(mapper, 0)[1] != 0:
    sys.exit("newuidmap failed")
with open("/proc/self/setgroups", "w") as f:
    f.write("deny")
with open("/proc/self/gid_map", "w") as f:
    f.write(f"0 {os.getgid()} 1")
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0 or \
        libc.mount(share_dir.encode(), mount_at.encode(), None, MS_BIND, None) != 0:
    sys.exit(f"mount: errno {ctypes.get_errno()}")
os.setuid(1)  # the container's process: a subordinate uid on the host
socket_path = os.path.join(mount_at, "tokend.sock")
through = subprocess.run([tokenctl, "token"], env={"TOKEND_SOCKET": socket_path}, capture_output=True, text=True)
direct = subprocess.run([tokenctl, "token", "--socket", main_socket], capture_output=True, text=True)
print(through.returncode, through.stdout.strip(), through.stderr.strip().replace("\n", " ") or "-")
print(direct.returncode, direct.stderr.strip().replace("\n", " "))
"""


@pytest.fixture
def subordinate_range():
    """/etc/subuid gives SHARER (nobody) a range, restored afterwards; newuidmap installed."""
    if not shutil.which("newuidmap"):
        pytest.fail("needs newuidmap (Debian's uidmap): `make deps` installs it")
    saved = open("/etc/subuid").read() if os.path.exists("/etc/subuid") else None
    with open("/etc/subuid", "a") as f:
        f.write(f"nobody:{RANGE_START}:{RANGE_COUNT}\n")
    yield
    if saved is None:
        os.unlink("/etc/subuid")
    else:
        with open("/etc/subuid", "w") as f:
            f.write(saved)


def test_a_container_gets_tokens_through_its_mounted_share_directory(server, make_tokend, workdir, subordinate_range):
    daemon = start(make_tokend, server, workdir, access=f'read-users = ["{SHARER[0]}"]\nread-groups = []')
    directory = home(workdir, SHARER)
    shared = os.path.join(directory, "for-container")
    os.makedirs(shared)
    os.chown(shared, *SHARER)
    # The container's processes are not its root: the mode lets its uids in (the directory is what is mounted).
    made = ctl_as(SHARER, daemon, "share", "create", os.path.join(shared, "tokend.sock"), "--mode", "0666")
    assert made.returncode == 0, made.stderr
    mount_at = os.path.join(directory, "mnt")
    os.makedirs(mount_at)
    os.chown(mount_at, *SHARER)
    result = subprocess.run(
        ["setpriv", f"--reuid={SHARER[0]}", f"--regid={SHARER[1]}", "--clear-groups", sys.executable, "-c", CONTAINER,
         shared, mount_at, os.path.join(BIN, "tokenctl"), daemon.socket, str(RANGE_START)],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    through, direct = result.stdout.splitlines()
    code, token, _ = through.split(" ", 2)
    assert code == "0" and active(server, token), through
    code, message = direct.split(" ", 1)
    assert code == "6" and "tokenctl share create" in message, direct
    # tokend saw the subordinate uid (inner uid 1 is RANGE_START on the host) on its own socket, and refused it.
    wait_for(lambda: "peer may call nothing" in daemon.logs() and f"peer.uid={RANGE_START}" in daemon.logs(),
             10, "the refusal of the subordinate uid logged")


def test_without_systemd_a_restart_ends_every_share_cleanly(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    assert ctl_as(CREATOR, daemon, "share", "create", path).returncode == 0
    assert len(listed(daemon, CREATOR)) == 1
    held = hold(path)
    assert daemon.stop() == 0
    assert closed_within(held, 5) < 5
    daemon.start()
    assert listed(daemon, CREATOR) == [], "no share outlives a restart without systemd's descriptor store"
    with socket.socket(socket.AF_UNIX) as s:
        with pytest.raises(ConnectionRefusedError):
            s.connect(path)
    with open(os.path.join(daemon.state, "shares.json")) as f:
        assert json.load(f) == [], "the records of the ended shares are gone too"


def test_one_person_holds_at_most_16_shares_and_64_connections_through_them(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    directory = home(workdir, CREATOR)
    for index in range(16):
        made = ctl_as(CREATOR, daemon, "share", "create", os.path.join(directory, f"s{index}.sock"))
        assert made.returncode == 0, made.stderr
    refused = ctl_as(CREATOR, daemon, "share", "create", os.path.join(directory, "s16.sock"))
    assert refused.returncode == 1 and "as many shares as one person may (16)" in refused.stderr, refused.stderr
    assert not os.path.lexists(os.path.join(directory, "s16.sock"))
    assert ctl_as(OTHER, daemon, "share", "create", os.path.join(home(workdir, OTHER), "o.sock")).returncode == 0, \
        "another person's shares are counted apart"
    # 64 connections through two of the creator's shares; the next one, through either, is refused.
    held = [hold(os.path.join(directory, f"s{index % 2}.sock")) for index in range(64)]
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.path.join(directory, "s5.sock"))
        s.sendall(json.dumps({"method": B + "GetToken", "parameters": {}}).encode() + b"\0")
        reply = json.loads(read_frame(s))
    assert reply == {"error": B + "TooManyShares", "parameters": {"limit": 64}}, reply
    assert call_as(OTHER, os.path.join(home(workdir, OTHER), "o.sock"), "GetToken").get("error") is None, \
        "another person's share still answers"
    held.pop().close()
    wait_for(lambda: sum(s["connections"] for s in listed(daemon, CREATOR)) == 63, 10, "a place freed")
    again = hold(os.path.join(directory, "s5.sock"))
    again.close()
    for s in held:
        s.close()


def test_a_share_answers_only_while_its_creator_may_read_the_session(server, make_tokend, workdir):
    daemon = start(make_tokend, server, workdir)
    path = os.path.join(home(workdir, CREATOR), "share.sock")
    assert ctl_as(CREATOR, daemon, "share", "create", path, "--mode", "0666").returncode == 0
    assert call_as(NOBODY, path, "GetToken").get("error") is None
    # The policy reloaded without the creator: every call through its share is refused from then on.
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace(f'read-users = ["{CREATOR[0]}", "{OTHER[0]}"]', f'read-users = ["{OTHER[0]}"]'))
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in daemon.logs(), 10, "reload")
    assert call_as(NOBODY, path, "GetToken").get("error") == "org.varlink.service.PermissionDenied"
    assert call_as(NOBODY, path, "Refresh", staleGeneration=0).get("error") == "org.varlink.service.PermissionDenied"
    assert f"peer.uid={CREATOR[0]}" in daemon.logs().split("reloaded")[-1], "the refusal names the creator"
