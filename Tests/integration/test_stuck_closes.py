# Over 90 s of `make test` (docs/testing.md): 21 tests, each run both ways tokend takes descriptors (the
# kernel's SO_PASSRIGHTS and the drained path), each with a tokend, a provider and other users' processes
# of its own; the stuck-close tests wait out a close that has not returned for a second, and the refresh
# test restarts tokend after a SIGKILL (138 s summed on the busy 2-core machine).
"""Descriptors a caller passes cannot stall tokend (issue 49, finding 1 and 2).

A TCP socket with SO_LINGER on and a send queue its peer never drains makes
close(2) sleep for the linger (120 s here); passed to tokend, it is closed by
tokend. Each test passes one where the outside review and the red team did —
on a refused connection, on a reader's connection, on a share's far side,
with a call, nested in a Unix socket (a close that hangs whatever SO_LINGER
says), and during a refresh — and shows that every other caller is answered
within 5 s while it lingers. Every test runs both ways tokend takes
descriptors: refused in the kernel (SO_PASSRIGHTS, Linux 6.16+), and drained
and closed off the loop (TOKEND_DESCRIPTORS=drain, as on Debian bookworm's
6.1). Other users are simulated with setpriv."""
import array
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from conftest import BIN, login, read_frame, wait_for

B = "io.tokend.Broker."
READER = (4320, 4320)  # may read the session
NOBODY = (4321, 4321)  # may do nothing
# The kernel counts the descriptors a user has in flight (sent over Unix sockets, not yet received)
# across all of that user's processes, up to its RLIMIT_NOFILE: two of these tests at once, flooding
# or holding descriptors as the same users, made each other's sends fail with ETOOMANYREFS (the
# busy fresh-clone run: "Too many references: cannot splice"). Users of their own, one test at a time.
pytestmark = pytest.mark.uses("uids 4320-4321", "descriptors in flight are counted per user, across "
                              "processes: these tests flood and hold them as these two users")
LINGER = 120


@pytest.fixture(params=["kernel", "drain"])
def intake(request):
    return request.param


def start(make_tokend, server, workdir, intake, **session):
    os.chmod(workdir, 0o755)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}, **session)
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(f'[access]\nread-users = ["{READER[0]}"]\nread-groups = []\n' + text)
    env = {**os.environ, **({"TOKEND_DESCRIPTORS": "drain"} if intake == "drain" else {})}
    daemon.start(env=env)
    login(daemon, server)
    return daemon


class Lingering:
    """A TCP socket whose last close sleeps `seconds`: SO_LINGER on, and a
    send queue its peer (held here, never read) does not drain."""

    def __init__(self, seconds=LINGER):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.sender = socket.socket()
        self.sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.sender.connect(self.listener.getsockname())
        self.peer, _ = self.listener.accept()
        self.sender.setblocking(False)
        try:
            while True:
                self.sender.send(b"x" * 65536)
        except BlockingIOError:
            pass
        self.sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, seconds))

    def nested(self):
        """A Unix socket with this one queued in it (its only reference):
        whoever closes the Unix socket last sleeps in this one's close, and
        SO_LINGER on the Unix socket changes nothing."""
        outer, inner = socket.socketpair()
        outer.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.sender.fileno()]))])
        self.sender.close()
        outer.close()
        return inner

    @property
    def inode(self):
        return os.fstat(self.sender.fileno()).st_ino

    def release(self):
        """Ends the linger: the peer reads nothing and resets."""
        self.peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.peer.close()
        self.listener.close()


def test_the_lingering_socket_makes_close_sleep():
    """The primitive itself, with a 1 s linger: a close that sleeps is what the others pass."""
    probe = Lingering(seconds=1)
    started = time.monotonic()
    probe.sender.close()
    assert time.monotonic() - started >= 0.9
    probe.release()


# Run as another user: connects to argv[1], asks for a descriptor if told,
# says it is ready, and on "go" sends argv[2] (a call) with descriptor argv[3]
# in one sendmsg and closes its own copy at once; on "go" again it reads the
# reply. A send the kernel refused leaves the descriptor with this process:
# its linger is turned off, so that this process's close does not sleep.
SENDER = r"""
import array, json, socket, struct, sys
path, frame, fd, expect = sys.argv[1], sys.argv[2].encode() + b"\0", int(sys.argv[3]), sys.argv[4] == "1"
s = socket.socket(socket.AF_UNIX)
s.connect(path)
def reply():
    data = b""
    while not data.endswith(b"\0"):
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return {"closed": True}
        data += chunk
    return json.loads(data[:-1])
armed = None
if expect:
    s.sendall(json.dumps({"method": "io.tokend.Broker.ExpectDescriptor", "parameters": {}}).encode() + b"\0")
    armed = reply()
print(json.dumps({"armed": armed}), flush=True)
sys.stdin.readline()
try:
    s.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    sent = True
except OSError as error:  # refused by the kernel (EPERM), or the connection closed (EPIPE)
    socket.socket(fileno=socket.dup(fd)).setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 0, 0))
    sent = False
    print(json.dumps({"unsent": str(error)}), file=sys.stderr, flush=True)
import os
os.close(fd)
print(json.dumps({"sent": sent}), flush=True)
sys.stdin.readline()
print(json.dumps({"reply": reply() if sent else None}), flush=True)
"""


def pass_as(daemon, user, socket_at, call, passed, expect=False, freeze=True, **parameters):
    """`user` sends `call` on the socket at `socket_at` with the socket `passed`
    (closed here). With `freeze`, tokend is stopped (SIGSTOP) while the sender
    sends and closes its copy, so that afterwards the only reference is the
    one in flight to tokend: its close is the last, the one that lingers. (A
    signal ends a lingering close early, so a test freezes tokend only before
    its closes begin to linger.)"""
    frame = json.dumps({"method": B + call, "parameters": parameters})
    fd = passed.fileno()
    os.set_inheritable(fd, True)
    child = subprocess.Popen(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
                              sys.executable, "-c", SENDER, socket_at, frame, str(fd), "1" if expect else "0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, pass_fds=(fd,))
    passed.close()
    outcome = json.loads(child.stdout.readline() or '{"armed": "no answer"}')
    if freeze:
        os.kill(daemon.process.pid, signal.SIGSTOP)
    try:
        child.stdin.write("go\n")
        child.stdin.flush()
        outcome.update(json.loads(child.stdout.readline()))
    finally:
        if freeze:
            os.kill(daemon.process.pid, signal.SIGCONT)
    child.stdin.write("go\n")
    child.stdin.flush()
    outcome.update(json.loads(child.stdout.readline()))
    assert child.wait(30) == 0
    return outcome


def closing_threads(pid):
    """tokend's threads asleep in close(2) (x86-64 syscall 3), where a lingering TCP close waits."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/syscall") as f:
                in_close = f.read().startswith("3 ")
            with open(f"/proc/{pid}/task/{task}/wchan") as f:
                asleep = f.read().strip() == "wait_woken"
        except (FileNotFoundError, ProcessLookupError):
            continue
        if in_close and asleep:
            found.append(task)
    return found


def answered_promptly(daemon, rounds=3):
    """Root's ListSessions, a cached GetToken and GetStatus, each answered within 5 s, a few times over."""
    for _ in range(rounds):
        for method in ("ListSessions", "GetToken", "GetStatus"):
            started = time.monotonic()
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(daemon.socket)
                s.sendall(json.dumps({"method": B + method, "parameters": {}}).encode() + b"\0")
                reply = json.loads(read_frame(s))
            assert "error" not in reply, (method, reply)
            assert time.monotonic() - started < 5, method
        time.sleep(0.2)


def held_sockets(pid):
    """The inodes of the sockets tokend holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def lingers_in_tokend(daemon, intake, outcome, inode=None):
    """Where tokend's way is the kernel's, a descriptor nobody asked for was
    refused at the send. Else tokend took it: passed itself (`inode`), it is
    closed with SO_LINGER off — gone from tokend at once; queued in something
    else tokend closes (a connection, a Unix socket), its close sleeps on a
    thread of tokend's own, not the loop and not the pool."""
    if intake == "kernel" and not outcome.get("armed"):
        assert outcome["sent"] is False, f"the kernel refuses a descriptor nobody asked for: {outcome}"
        return
    assert outcome["sent"], outcome
    if inode is not None:
        wait_for(lambda: inode not in held_sockets(daemon.process.pid), 10, "the passed socket closed by tokend")
        assert not closing_threads(daemon.process.pid), "its close did not sleep: SO_LINGER was turned off"
    else:
        wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in the lingering close")


def test_a_refused_peer_passing_a_lingering_socket_delays_nobody(server, make_tokend, workdir, intake):
    daemon = start(make_tokend, server, workdir, intake)
    lingering = Lingering()
    try:
        outcome = pass_as(daemon, NOBODY, daemon.socket, "GetStatus", lingering.sender)
        if outcome["sent"]:
            assert outcome["reply"].get("error") == "org.varlink.service.PermissionDenied" or outcome["reply"].get(
                "closed"), outcome
        # Unread, it waits in the refused connection, which goes to the closer as it is: its
        # close there drops it, and sleeps in the linger.
        lingers_in_tokend(daemon, intake, outcome)
        answered_promptly(daemon)
    finally:
        lingering.release()


def test_a_readers_unasked_lingering_socket_delays_nobody(server, make_tokend, workdir, intake):
    daemon = start(make_tokend, server, workdir, intake)
    lingering = Lingering()
    try:
        inode = lingering.inode
        outcome = pass_as(daemon, READER, daemon.socket, "GetToken", lingering.sender)
        if outcome["sent"]:
            assert outcome["reply"]["parameters"]["token"]["accessToken"], "the call itself is answered"
        lingers_in_tokend(daemon, intake, outcome, inode)
        answered_promptly(daemon)
    finally:
        lingering.release()


def test_a_lingering_socket_passed_with_a_call_delays_nobody(server, make_tokend, workdir, intake):
    """Asked for (ExpectDescriptor), so both ways take it: CreateShare refuses a
    TCP socket and tokend closes it — on its closer, not the pool."""
    daemon = start(make_tokend, server, workdir, intake)
    lingering = Lingering()
    try:
        inode = lingering.inode
        outcome = pass_as(daemon, READER, daemon.socket, "CreateShare", lingering.sender, expect=True,
                          path=os.path.join(workdir, "share.sock"))
        assert outcome["armed"] == {"parameters": {}}, outcome
        assert outcome["reply"]["error"] == B + "ShareRefused", outcome
        lingers_in_tokend(daemon, intake, outcome, inode)
        answered_promptly(daemon)
    finally:
        lingering.release()


def test_a_close_that_hangs_whatever_so_linger_says_delays_nobody(server, make_tokend, workdir, intake):
    """A Unix socket with the lingering one queued in it: SO_LINGER means
    nothing to the Unix socket, and its close drops the queued socket, whose
    last close then sleeps in whichever thread closed the Unix socket."""
    daemon = start(make_tokend, server, workdir, intake)
    lingering = Lingering()
    try:
        outcome = pass_as(daemon, READER, daemon.socket, "CreateShare", lingering.nested(), expect=True,
                          path=os.path.join(workdir, "share.sock"))
        assert outcome["reply"]["error"] == B + "ShareRefused", outcome
        lingers_in_tokend(daemon, intake, outcome)
        answered_promptly(daemon)
    finally:
        lingering.release()


def test_a_persons_stuck_close_refuses_their_further_descriptors(server, make_tokend, workdir, intake):
    """While a close of a person's has not returned for a second, asleep in
    close(2), they are asked for no more descriptors (DescriptorsPending);
    everyone else is still served, and a person whose closes are quick is
    never refused — not even when the scheduler leaves a closing thread
    waiting for a second on a busy machine (issue 50: in the first loop the
    clock alone once counted such a quick close as stuck, and the [drain]
    case's connection was closed unread)."""
    daemon = start(make_tokend, server, workdir, intake)
    share = os.path.join(workdir, "share.sock")

    def plain():
        mine, other = socket.socketpair()
        other.close()
        return pass_as(daemon, READER, daemon.socket, "CreateShare", mine, expect=True, freeze=False, path=share)

    for _ in range(40):
        outcome = plain()
        assert (outcome["reply"] or {}).get("error") == B + "ShareRefused", \
            f"quick closes, back to back, never refused: {outcome}"
    lingering = Lingering()
    try:
        outcome = pass_as(daemon, READER, daemon.socket, "CreateShare", lingering.nested(), expect=True, path=share)
        assert outcome["reply"]["error"] == B + "ShareRefused", outcome
        wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in a lingering close")
        outcome = wait_for(lambda: (lambda o: o if "parameters" not in o["armed"] or o["armed"].get("error")
                                    else None)(plain()), 10,
                           "ExpectDescriptor refused once the close has not returned for a second")
        if intake == "kernel":
            # The stuck one, and any passed in its first second, queued behind it.
            assert outcome["armed"]["error"] == B + "DescriptorsPending", outcome
            assert outcome["armed"]["parameters"]["limit"] == 256 and outcome["armed"]["parameters"]["pending"] >= 1
            assert outcome["sent"] is False, "and the kernel refuses the descriptor"
        else:
            # Where the kernel takes every descriptor sent, the person's connections are read no
            # further: closed unread (each read could bring 253 more).
            assert outcome["armed"] == {"closed": True}, outcome
        answered_promptly(daemon)
        assert len(closing_threads(daemon.process.pid)) == 1, "one person's stuck closes take one thread"
    finally:
        lingering.release()
    # The linger ends (the peer resets): the person is asked for descriptors again.
    wait_for(lambda: not closing_threads(daemon.process.pid), 30, "the stuck close ended")
    outcome = wait_for(lambda: (lambda o: None if o["armed"].get("error") else o)(plain()), 10,
                       "ExpectDescriptor answered again")
    assert outcome["reply"]["error"] == B + "ShareRefused", outcome


def test_a_share_far_side_passing_a_lingering_socket_delays_nobody(server, make_tokend, workdir, intake):
    daemon = start(make_tokend, server, workdir, intake)
    home = os.path.join(workdir, "reader")
    os.makedirs(home)
    os.chown(home, *READER)
    path = os.path.join(home, "share.sock")
    made = subprocess.run(["setpriv", f"--reuid={READER[0]}", f"--regid={READER[1]}", "--clear-groups",
                           os.path.join(BIN, "tokenctl"), "share", "create", "--socket", daemon.socket,
                           "--mode", "0666", path], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    lingering = Lingering()
    try:
        inode = lingering.inode
        outcome = pass_as(daemon, NOBODY, path, "GetToken", lingering.sender)
        if outcome["sent"]:
            assert outcome["reply"]["parameters"]["token"]["accessToken"], outcome
        lingers_in_tokend(daemon, intake, outcome, inode)
        answered_promptly(daemon)
        # The far side counts in the creator's budget for connections through shares, not
        # in the creator's own: the creator is still served on tokend's socket.
        served = subprocess.run(["setpriv", f"--reuid={READER[0]}", f"--regid={READER[1]}", "--clear-groups",
                                 os.path.join(BIN, "tokenctl"), "token", "--socket", daemon.socket],
                                capture_output=True, text=True, timeout=10)
        assert served.returncode == 0, served.stderr
    finally:
        lingering.release()


def test_a_refresh_with_lingering_sockets_around_it_keeps_the_session(server, make_tokend, workdir, intake):
    """The red team's second finding: stuck closes on the pool right after a
    forced refresh kept the rotated token from its durable write, and a
    restart replayed the spent one (the provider revokes the grant for it).
    Now nothing a caller passes is closed on the pool: the refresh's token is
    written, and after a restart tokend refreshes with it."""
    daemon = start(make_tokend, server, workdir, intake)
    held = []
    try:
        before = json.loads(daemon.ctl("status", "--json").stdout)["generation"]
        refresh = subprocess.Popen([os.path.join(BIN, "tokenctl"), "refresh", "--socket", daemon.socket],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lingering = Lingering()
        held.append(lingering)
        share = os.path.join(workdir, "share.sock")
        pass_as(daemon, READER, daemon.socket, "CreateShare", lingering.nested(), expect=True, path=share)
        for _ in range(3):
            plain, other = socket.socketpair()
            other.close()
            pass_as(daemon, READER, daemon.socket, "CreateShare", plain, expect=True, freeze=False, path=share)
        assert refresh.wait(30) == 0, refresh.stderr.read()
        wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in a lingering close")
        answered_promptly(daemon, rounds=1)
        after = json.loads(daemon.ctl("status", "--json").stdout)["generation"]
        assert after > before
        # As the watchdog or an admin would: killed while the closes still linger.
        daemon.stop(signal.SIGKILL)
        daemon.start(env={**os.environ, **({"TOKEND_DESCRIPTORS": "drain"} if intake == "drain" else {})})
        assert daemon.ctl("refresh").returncode == 0, "the refresh token tokend kept is the live one"
        status = json.loads(daemon.ctl("status", "--json").stdout)
        assert status["state"] == "active" and status["generation"] > after, status
    finally:
        for lingering in held:
            lingering.release()


# Run as another user (an outside review's attacks on the first version of
# this round): sends on tokend's socket at argv[1], after ExpectDescriptor
# and a Subscribe that keeps the connection busy (tokend reads it no further)
# when argv[2] == "armed"; then argv[3] messages each carrying 253 copies of
# /dev/null, the first of them also descriptor argv[4] (-1: none), with
# MSG_OOB when argv[5] == "oob" — on "go", once it said it is ready; closes
# its copy of argv[4], says "sent", and on "go" again closes the connection.
FLOODER = r"""
import array, json, os, socket, sys
path, how, count, fd, oob = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "oob"
s = socket.socket(socket.AF_UNIX)
s.connect(path)
if how == "armed":
    for method, more in (("ExpectDescriptor", False), ("Subscribe", True)):
        s.sendall(json.dumps({"method": "io.tokend.Broker." + method, "parameters": {}, **({"more": True} if more else {})}).encode() + b"\0")
        data = b""
        while not data.endswith(b"\0"):
            data += s.recv(65536)
null = os.open("/dev/null", os.O_RDONLY)
print("ready", flush=True)
sys.stdin.readline()
sent = 0
for index in range(count):
    fds = ([fd] if index == 0 and fd >= 0 else []) + [null] * (253 - (1 if index == 0 and fd >= 0 else 0))
    try:
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))], socket.MSG_OOB if oob else 0)
        sent += 1
    except OSError as error:
        print(json.dumps({"error": str(error)}), file=sys.stderr, flush=True)
        break
if fd >= 0:
    os.close(fd)
print(json.dumps({"sent": sent}), flush=True)
sys.stdin.readline()
s.close()
"""


def flood_as(daemon, user, how, count, passed=None, oob=False):
    """The FLOODER as `user`; returns once it sent and closed its copy of
    `passed` (tokend stopped meanwhile, as in pass_as: its close is the last),
    with a function that ends it."""
    fd = passed.fileno() if passed else -1
    if passed:
        os.set_inheritable(fd, True)
    child = subprocess.Popen(["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups",
                              sys.executable, "-c", FLOODER, daemon.socket, how, str(count), str(fd),
                              "oob" if oob else "plain"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             pass_fds=(fd,) if passed else ())
    if passed:
        passed.close()
    assert child.stdout.readline().strip() == "ready"
    if passed:
        os.kill(daemon.process.pid, signal.SIGSTOP)
    try:
        child.stdin.write("go\n")
        child.stdin.flush()
        outcome = json.loads(child.stdout.readline() or "{}")
    finally:
        if passed:
            os.kill(daemon.process.pid, signal.SIGCONT)
    if not outcome.get("sent"):
        outcome["error"] = child.stderr.readline().strip()

    def end():
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(30) == 0
    return outcome, end


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_an_out_of_band_byte_with_a_descriptor_delays_nobody(server, make_tokend, workdir, intake):
    """MSG_OOB on a Unix socket (Linux 5.15+): a read that passes the byte
    frees it, and its descriptors' last close ran in the reading thread — the
    loop. Connections take it inline (SO_OOBINLINE): it is one more descriptor
    for the closer. Refused peers where the kernel takes descriptors; a reader
    who asked for one where it does not."""
    daemon = start(make_tokend, server, workdir, intake)
    lingering = Lingering()
    who, how = (NOBODY, "refused") if intake == "drain" else (READER, "armed")
    outcome, end = flood_as(daemon, who, how, 1, passed=lingering.nested(), oob=True)
    try:
        assert outcome["sent"] == 1, outcome
        end()
        wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in the lingering close")
        answered_promptly(daemon)
    finally:
        lingering.release()


def test_descriptors_behind_a_stuck_close_do_not_fill_tokends_table(server, make_tokend, workdir, intake):
    """Behind one stuck close, a flood of descriptors (253 a message, on
    several connections) is not read into tokend's descriptor table: a
    connection that may hold them goes to the closer as it is, and a person
    whose closes are stuck is read no further. tokend keeps answering and its
    table stays small."""
    daemon = start(make_tokend, server, workdir, intake)
    before = open_descriptors(daemon.process.pid)
    lingering = Lingering()
    who, how = (NOBODY, "refused") if intake == "drain" else (READER, "armed")
    ends = []
    try:
        outcome, end = flood_as(daemon, who, how, 1, passed=lingering.nested())
        assert outcome["sent"] == 1, outcome
        ends.append(end)
        sent = 1
        # The kernel holds at most the sender's RLIMIT_NOFILE in flight (ETOOMANYREFS past it).
        for _ in range(6):
            outcome, end = flood_as(daemon, who, how, 40)
            sent += outcome["sent"]
            ends.append(end)
        assert sent * 253 > 1000, f"the flood is larger than the bound below: {sent} messages"
        for end in ends:
            end()
        wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in the lingering close")
        answered_promptly(daemon)
        held = open_descriptors(daemon.process.pid) - before
        assert held < 300, f"{held} descriptors more than before the flood of {sent * 253}"
    finally:
        lingering.release()


def test_a_share_far_side_with_a_stuck_close_does_not_hold_up_its_creator(server, make_tokend, workdir, intake):
    """What a share's far side passes goes to the far side's own closer lane:
    its stuck close does not make the creator's ExpectDescriptor wait (an
    outside review found the creator answered DescriptorsPending)."""
    daemon = start(make_tokend, server, workdir, intake)
    home = os.path.join(workdir, "reader")
    os.makedirs(home)
    os.chown(home, *READER)

    def share(name):
        return subprocess.run(["setpriv", f"--reuid={READER[0]}", f"--regid={READER[1]}", "--clear-groups",
                               os.path.join(BIN, "tokenctl"), "share", "create", "--socket", daemon.socket,
                               "--mode", "0666", os.path.join(home, name)], capture_output=True, text=True, timeout=30)

    assert share("share.sock").returncode == 0
    lingering = Lingering()
    try:
        # Nested where tokend takes it (its close sleeps however SO_LINGER is set); where the
        # kernel refuses it, the sender keeps it and turns its linger off.
        passed = lingering.nested() if intake == "drain" else lingering.sender
        outcome = pass_as(daemon, NOBODY, os.path.join(home, "share.sock"), "GetToken", passed)
        if intake == "kernel":
            assert outcome["sent"] is False, outcome
        else:
            wait_for(lambda: closing_threads(daemon.process.pid), 10, "a tokend thread asleep in the far side's close")
            time.sleep(1.2)  # past the second after which a person's close counts as stuck
        made = share("again.sock")
        assert made.returncode == 0, made.stderr
        answered_promptly(daemon, rounds=1)
    finally:
        lingering.release()
