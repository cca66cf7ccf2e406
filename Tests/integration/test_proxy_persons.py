"""tokend-proxy's per-user slots on TCP count persons, as tokend's own socket does: the uids of someone's
/etc/subuid range (what their user namespaces connect as) are that someone, not a budget each."""
import subprocess

from conftest import free_port
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
