"""tokend-proxy's per-user slots on TCP count persons, as tokend's own socket does: the uids of someone's
/etc/subuid range (what their user namespaces connect as) are that someone, not a budget each."""
import os
import socket
import subprocess

from conftest import BIN, free_port
from test_hostile_peers import PERSON_UID, RANGE_START, subordinate_range  # noqa: F401 (a fixture)
from test_proxy import ProxyProcess, RecordingAPI
from test_proxy_upstreams import HOLD, get, logged_in


def hold(port, uid, count):
    """A process of `uid` that opens `count` connections to the proxy and keeps those admitted."""
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3", "-c",
                             HOLD, str(port), str(count)], stdout=subprocess.PIPE, text=True)


def test_on_tcp_the_uids_of_one_person_share_its_slots(server, make_tokend, workdir, subordinate_range):  # noqa: F811
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    # Started after the fixture wrote /etc/subuid: the proxy reads it at start.
    proxy = ProxyProcess(daemon, recording.url, workdir, "--max-connections", "16", "--max-connections-per-user", "4",
                         "--header-timeout", "60", port=free_port())
    holders = []
    try:
        # The range's owner and two uids of its range: three uids, one person, two connections each.
        outcomes = []
        for uid in (PERSON_UID, RANGE_START + 1, RANGE_START + 2):
            holders.append(hold(proxy.port, uid, 2))
            held, refused = map(int, holders[-1].stdout.readline().split())
            outcomes.append((uid, held, refused))
        # Counted per uid, each would hold both of its connections (6 held); counted per person, the
        # person's four slots are taken by the first two, and the third uid's connections are refused.
        assert [(held, refused) for _, held, refused in outcomes] == [(2, 0), (2, 0), (0, 2)], outcomes
        assert f"uid={RANGE_START + 2}" in proxy.logs(), proxy.logs()
        # A uid outside the range is someone else, with slots of its own.
        other = hold(proxy.port, RANGE_START - 1, 2)
        holders.append(other)
        assert tuple(map(int, other.stdout.readline().split())) == (2, 0)
        # And the proxy's own user is served meanwhile.
        assert get(proxy.port, "/data")[0] == 200
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        proxy.stop()


def test_on_a_unix_socket_another_user_is_held_to_a_persons_share(server, make_tokend, workdir):
    """With a --mode that lets others connect, another user's idle connections (each refused 403 once its
    head comes) count as that person's: the proxy's own user is still served."""
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    os.chmod(workdir, 0o755)
    proxy = ProxyProcess(daemon, recording.url, workdir, "--max-connections", "8", "--header-timeout", "60", mode="0666")
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                               HOLD_UNIX, proxy.path, "8"], stdout=subprocess.PIPE, text=True)
    try:
        held, refused = map(int, holder.stdout.readline().split())
        assert (held, refused) == (4, 4), "uid 65534 holds a person's four slots (half of 8), no more"
        assert proxy.status("/data") == 200, "the proxy's own user is served meanwhile"
    finally:
        holder.kill()
        holder.wait()
        proxy.stop()


def test_a_second_proxy_does_not_take_a_live_ones_socket_and_a_stop_removes_only_its_own(server, make_tokend, workdir):
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    first = ProxyProcess(daemon, recording.url, workdir)
    inode = os.stat(first.path).st_ino
    second = subprocess.run([os.path.join(BIN, "tokend-proxy"), "--socket", daemon.socket, "--listen", f"unix:{first.path}",
                             "--upstream", recording.url], capture_output=True, text=True, timeout=30)
    try:
        assert second.returncode == 1 and "in use" in second.stderr, (second.returncode, second.stderr)
        assert os.stat(first.path).st_ino == inode and first.status("/data") == 200, "the first still serves its socket"
        # A socket file another process put at the path since is not the first's to remove.
        os.unlink(first.path)
        other = socket.socket(socket.AF_UNIX)
        other.bind(first.path)
    finally:
        first.stop()
    assert os.path.exists(first.path), "the first proxy's stop left the other process's socket"
    other.close()
    os.unlink(first.path)


HOLD_UNIX = HOLD.replace('socket.create_connection(("127.0.0.1", port))', "socket.socket(socket.AF_UNIX)") \
    .replace("s.settimeout(0.5)", "s.connect(path)\n    s.settimeout(0.5)") \
    .replace("port, count = int(sys.argv[1]), int(sys.argv[2])", "path, count = sys.argv[1], int(sys.argv[2])")


def test_on_tcp_two_other_people_together_cannot_take_the_proxys_own_users_reserve(server, make_tokend, workdir):
    daemon = logged_in(server, make_tokend)
    recording = RecordingAPI()
    proxy = ProxyProcess(daemon, recording.url, workdir, "--max-connections", "8", "--max-connections-per-user", "4",
                         "--header-timeout", "60", port=free_port())
    holders = [hold(proxy.port, 65534, 4)]
    try:
        assert tuple(map(int, holders[0].stdout.readline().split())) == (4, 0), "the first person holds its share"
        holders.append(hold(proxy.port, 65533, 4))
        # Each within its own share, but together past what others may hold (8 less the proxy's user's 4).
        assert tuple(map(int, holders[1].stdout.readline().split())) == (0, 4)
        for _ in range(3):
            assert get(proxy.port, "/data")[0] == 200, "the proxy's own user is served"
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        proxy.stop()
