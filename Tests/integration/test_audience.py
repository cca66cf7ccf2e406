"""Security round four (issue 41): what tokend hands out is authorized by the
audience of the token, not by the name asked for. Against the test
authorization server in both refresh modes ("narrow": django-oauth-toolkit,
one token for all the grant's resources; "keep-wide": Entra ID's, one resource
per token), with what each caller *received* shown by the provider's own
introspection (`aud`), not by whether the call was answered.

Other users are simulated with setpriv (numeric uid and gid); pages are
driven through tokend-native-host, as a browser drives it."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import BIN, wait_for
from resources import introspect, mode_server, password_grant, refreshes
from resources import mode  # noqa: F401 (fixture)
from test_native_host import Host

B = "io.tokend.Broker."
READER = (4242, 4242)  # may read the session; resource-access denies it the admin API
APP = "http://127.0.0.1:8123"


@pytest.fixture(autouse=True)
def setpriv_is_installed() -> None:
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv is missing: apt install util-linux (these tests act as other users with it)")


@pytest.fixture
def server(workdir, mode):
    instance = mode_server(os.path.join(workdir, "as"), mode)
    yield instance
    instance.stop()


def urls():
    # The admin API first: under keep-wide a refresh naming no resource gets the first one (the provider's default).
    return "https://admin.api.test/", "https://mail.api.test/"


def start(make_tokend, server, workdir, resources, **session):
    """A tokend other users can reach, logged in with a refresh token whose grant carries `resources`."""
    os.chmod(workdir, 0o755)
    admin, mail = urls()
    keys = {"scope": '"read write"', "resources": json.dumps(resources),
            "introspection-endpoint": json.dumps(server.base + "/o/introspect/"),
            "resource-access": '{ "%s" = { read-users = ["0"] } }' % admin}
    keys.update(session)
    daemon = make_tokend(server, daemon={"socket-mode": '"0666"', "forced-refreshes-per-minute": 600},
                         **keys)
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write('[access]\nread-users = ["%d"]\nread-groups = []\n' % READER[0] + text)
    daemon.start()
    status, grant = password_grant(server, resources, "read write")
    assert status == 200, grant
    reply = daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
    assert "error" not in reply, reply
    return daemon


def as_reader(daemon, method, **parameters):
    """One Varlink call made by the reader's uid; returns the reply."""
    program = ("import json,socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
               "s.sendall(sys.argv[2].encode()+b'\\0'); data=b''\n"
               "while not data.endswith(b'\\0'): data+=s.recv(65536)\n"
               "print(data[:-1].decode())")
    message = json.dumps({"method": B + method, "parameters": parameters})
    result = subprocess.run(["setpriv", f"--reuid={READER[0]}", f"--regid={READER[1]}", "--clear-groups",
                             "/usr/bin/python3", "-c", program, daemon.socket, message],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def audience(server, reply):
    """The provider's audience for the token a reply carries (empty when the token has none)."""
    answer = introspect(server, reply["parameters"]["token"]["accessToken"])
    assert answer.get("active"), answer
    return answer.get("aud") or []


CALLS = [("GetToken", {}), ("GetToken", {"scope": "read"}), ("Refresh", {"staleGeneration": 0}),
         ("GetToken", {"resource": urls()[1]}), ("GetToken", {"resource": urls()[1], "scope": "read"}),
         ("GetToken", {})]  # the last one again: answered from the fast path when it was answered at all


def test_a_denied_reader_never_holds_a_token_for_the_resource_it_is_denied(server, make_tokend, workdir, mode):
    admin, mail = urls()
    daemon = start(make_tokend, server, workdir, [admin, mail])
    upstream = len(refreshes(server))
    answered = []
    for method, parameters in CALLS:
        reply = as_reader(daemon, method, **parameters)
        if "error" in reply:
            assert reply["error"] == B + "ResourceNotAllowed", (method, parameters, reply)
            assert reply["parameters"]["resource"] == admin and "resource-access" in reply["parameters"]["reason"]
            continue
        aud = audience(server, reply)
        assert admin not in aud and aud, f"{method}({parameters}) gave the reader a token for {aud}"
        answered.append((method, parameters, aud))
    status = daemon.call(B + "GetStatus")[1]["parameters"]["status"]
    assert status["resourceAccess"] == [{"resource": admin, "users": ["0"], "groups": []}]
    if mode == "narrow":
        # One token for both APIs (shared-audience): the reader gets none at all.
        assert status["strategy"] == "shared-audience" and not answered, answered
        assert len(refreshes(server)) == upstream, "a refused reader's forced Refresh made no refresh happen"
    else:
        # One resource per token: the mail API's tokens, confirmed by introspection, are the reader's;
        # the session's own token has the provider's default audience (the admin API) and is not.
        assert status["strategy"] == "per-resource", status["strategyReason"]
        assert [(m, p) for m, p, _ in answered] == [(m, p) for m, p in CALLS if p.get("resource") == mail], answered
        assert all(aud == [mail] for _, _, aud in answered)
    # root (admitted to both) still gets the session's token, whose audience covers the admin API.
    own = daemon.call(B + "GetToken")[1]
    assert admin in audience(server, own)
    # tokenctl says so, and exits 6.
    refused = subprocess.run(["setpriv", f"--reuid={READER[0]}", f"--regid={READER[1]}", "--clear-groups",
                              os.path.join(BIN, "tokenctl"), "token", "--socket", daemon.socket],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode == 6 and "resource-access" in refused.stderr, (refused.returncode, refused.stderr)
    print(f"{mode}: reader answered {[(m, p, a) for m, p, a in answered]}")


def test_pages_never_get_a_token_whose_audience_is_outside_web_resources(server, make_tokend, workdir, mode):
    admin, mail = urls()
    daemon = start(make_tokend, server, workdir, [admin, mail], **{
        "web-origins": json.dumps([APP]), "web-resources": json.dumps([mail])})
    host = Host(daemon)
    upstream = len(refreshes(server))
    received = []
    for method, parameters in CALLS + [("Refresh", {"resource": mail})]:
        reply = host.call(method, origin=APP, **parameters)
        if "error" in reply:
            assert reply["error"] == B + "ResourceNotAllowed", (method, parameters, reply)
            assert reply["parameters"]["resource"] == admin and "web-resources" in reply["parameters"]["reason"]
            continue
        aud = audience(server, reply)
        assert aud and set(aud) <= {mail}, f"a page's {method}({parameters}) got a token for {aud}"
        received.append((method, parameters))
    status = host.call("GetStatus")["parameters"]["status"]
    if mode == "narrow":
        assert not received, received
        assert status["pageTokens"] == "none" and "shared-audience" in status["pageTokensReason"], status
        assert len(refreshes(server)) == upstream, "a page that may have no token makes no refresh happen"
    else:
        assert received == [(m, p) for m, p in CALLS + [("Refresh", {"resource": mail})] if p.get("resource") == mail]
        assert status["pageTokens"] == "some", status
    # The same calls without the page mark are root's, and answered: the refusals were the audience rule's.
    assert "error" not in daemon.call(B + "GetToken")[1]
    # A page of an origin the session does not list is refused by tokend too (the host's own check aside).
    reply = daemon.call(B + "GetToken", resource=mail, page="http://127.0.0.1:9")[1]
    assert reply["error"] == B + "ResourceNotAllowed" and "web-origins" in reply["parameters"]["reason"], reply
    host.process.stdin.close()
    assert host.process.wait(5) == 0


def test_a_reader_cycling_keys_makes_a_bounded_number_of_grants_and_evicts_nobody(workdir, make_tokend):
    server = mode_server(os.path.join(workdir, "as"), "keep-wide")
    try:
        apis = [f"https://api{i}.test/" for i in range(12)]
        daemon = start(make_tokend, server, workdir, apis, **{"resource-access": "{}"})
        # root's key, held before the reader starts.
        kept = daemon.call(B + "GetToken", resource=apis[0], scope="write")[1]
        assert "error" not in kept, kept
        before = len(refreshes(server))
        keys = [(r, s) for r in apis for s in ("read", "write", None)]
        held_before = {(t.get("resource"), t.get("scope")) for t in
                       daemon.call(B + "GetStatus")[1]["parameters"]["status"]["tokens"]} & set(keys)
        assert (apis[0], "write") in held_before
        refused = 0
        for _ in range(3):
            for resource, scope in keys:
                reply = as_reader(daemon, "GetToken", resource=resource, **({"scope": scope} if scope else {}))
                if "error" in reply:
                    assert reply["error"] == B + "TooManyKeys", reply
                    assert reply["parameters"]["limit"] == 16 and reply["parameters"]["reason"]
                    refused += 1
        grants = len(refreshes(server)) - before
        assert grants <= 16, f"{len(keys) * 3} calls over {len(keys)} keys made {grants} grants"
        # Answered: the 16 keys it may make and those held before (root's, and the one tokend made learning), thrice.
        assert refused == (len(keys) - 16 - len(held_before)) * 3, (refused, held_before)
        held = {(t.get("resource"), t.get("scope")) for t in
                daemon.call(B + "GetStatus")[1]["parameters"]["status"]["tokens"]}
        assert (apis[0], "write") in held, "root's key was not evicted"
        print(f"{len(keys) * 3} calls over {len(keys)} keys: {grants} grants, {refused} TooManyKeys")
    finally:
        server.stop()


def test_a_handed_in_grant_missing_a_resource_is_not_narrowed_by_a_reader(workdir, make_tokend):
    server = mode_server(os.path.join(workdir, "as"), "narrow")
    try:
        admin, mail = urls()
        os.chmod(workdir, 0o755)
        daemon = make_tokend(server, daemon={"socket-mode": '"0666"'}, **{
            "scope": '"read write"', "resources": json.dumps([admin, mail]),
            "introspection-endpoint": json.dumps(server.base + "/o/introspect/")})
        with open(daemon.config) as f:
            text = f.read()
        with open(daemon.config, "w") as f:
            f.write('[access]\nread-users = ["%d"]\nread-groups = []\n' % READER[0] + text)
        daemon.start()
        status, grant = password_grant(server, [admin], "read write")  # the grant lacks the mail API
        assert status == 200, grant
        assert "error" not in daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
        reply = as_reader(daemon, "GetToken", scope="read")
        assert "error" not in reply, reply
        status = daemon.call(B + "GetStatus")[1]["parameters"]["status"]
        assert status["strategy"] == "shared-audience", status["strategyReason"]
        # No refresh asked for less than the whole scope or for one resource the grant has.
        for entry in refreshes(server):
            assert entry["scope"] in (None, "read write") or set(entry["scope"].split()) == {"read", "write"}, entry
        # The session's own refresh, for everyone, works afterwards; the grant is whole.
        for _ in range(2):
            reply = daemon.call(B + "Refresh")[1]
            assert "error" not in reply, reply
            assert set(introspect(server, reply["parameters"]["token"]["accessToken"])["scope"].split()) == {"read", "write"}
        refused = daemon.call(B + "GetToken", resource=mail)[1]
        assert refused["error"] == B + "TargetRefused", refused
        assert not any(e["reuse"] or e["family_revoked"] for e in refreshes(server))
    finally:
        server.stop()


def test_reset_strategy_is_an_admins_and_is_told_to_subscribers(server, make_tokend, workdir, mode):
    admin, mail = urls()
    daemon = start(make_tokend, server, workdir, [admin, mail])
    for _ in range(2):  # the second from the fast path, whose reply is cached
        assert "error" not in daemon.call(B + "GetToken", resource=mail, scope="read")[1]
    learnt = daemon.call(B + "GetStatus")[1]["parameters"]["status"]["strategy"]
    assert learnt in ("shared-audience", "per-resource")
    watcher = subprocess.Popen([os.path.join(BIN, "tokenctl"), "watch", "--socket", daemon.socket],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(watcher.stdout.readline())["event"] == "status"
        reader = as_reader(daemon, "ResetStrategy")
        assert reader["error"] == "org.varlink.service.PermissionDenied", reader
        result = daemon.ctl("reset-strategy")
        assert result.returncode == 0 and "undetermined" in result.stdout, (result.stdout, result.stderr)
        assert json.loads(watcher.stdout.readline())["event"] == "strategyReset"
    finally:
        watcher.kill()
    # The key is made again at its first generation: the fast path answers with its new token, not the cached reply.
    fresh = [daemon.call(B + "GetToken", resource=mail, scope="read")[1]["parameters"]["token"] for _ in range(2)]
    assert fresh[0] == fresh[1], fresh
    assert daemon.call(B + "GetStatus")[1]["parameters"]["status"]["strategy"] == learnt, "learnt again"
