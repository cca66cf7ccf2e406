# Over 90 s of `make test` (docs/testing.md): DPoP against Glewlwyd, a real provider with nonces, started per
# test, and against swtpm TPMs (a key made, signed with, lost and refused); the proof-bound tests send
# thousands of GetProof calls (135 s summed on the busy 2-core machine).
"""DPoP-bound tokens (RFC 9449) against a provider no one here wrote:
Glewlwyd with DPoP on and nonces mandatory (Tests/integration/provider2.py,
Glewlwyd(dpop=True)), its client DPOP_CLIENT_ID refusing token requests
without a proof. The key in the state file, or in a TPM (swtpm, started here
in socket mode; tpm2-tools read what tokend made)."""
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import BIN, free_port, read_frame, varlink_call, wait_for
from provider2 import CLIENT_SECRET, DPOP_CLIENT_ID, Glewlwyd
from test_broker import waiting_requests
from test_login import authorization_url
from test_provider2 import B, Tokend2, start_login


class DPoPTokend(Tokend2):
    """Tokend2 whose session "g2" uses DPOP_CLIENT_ID with dpop on; `tpm`: [daemon] tpm."""

    def __init__(self, directory, provider, dpop_key="state", tpm=None, daemon_lines=(), session_lines=(), **session):
        """`daemon_lines`, `session_lines`: TOML lines added to [daemon] and to the session as they are."""
        super().__init__(directory, provider, **{"client-id": DPOP_CLIENT_ID, "client-auth": "basic",
                                                  "dpop": True, "dpop-key": dpop_key, **session})
        daemon_lines = list(daemon_lines) + ([f'tpm = "{tpm}"'] if tpm else [])
        with open(self.config) as f:
            text = f.read()
        text = text.replace("[daemon]\n", "[daemon]\n" + "".join(line + "\n" for line in daemon_lines), 1)
        with open(self.config, "w") as f:
            f.write(text + "".join(line + "\n" for line in session_lines))

    def dpop(self):
        return self.status()["dpop"]

    def stored_record(self):
        """What a thief copying the state directory gets (no state key here: the record is plain)."""
        with open(os.path.join(self.state, "g2.session")) as f:
            return json.load(f)["record"]


class SwTPM:
    """swtpm in socket mode on free loopback ports, its state in `directory`."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.port = free_port(count=2)  # the TPM's port, and its control port after it
        self.start()

    def start(self):
        """(Again, after stop: the same ports and the same TPM state.)"""
        self.process = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={self.directory}",
             "--server", f"type=tcp,port={self.port},bindaddr=127.0.0.1",
             "--ctrl", f"type=tcp,port={self.port + 1},bindaddr=127.0.0.1",
             "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.tools("tpm2_getrandom", "4", "--hex").returncode == 0, 20, "swtpm answering")
        return self

    @property
    def tcti(self):
        return f"swtpm:host=127.0.0.1,port={self.port}"

    def tools(self, *command, cwd=None):
        return subprocess.run(list(command), capture_output=True, text=True, timeout=60, cwd=cwd,
                              env={**os.environ, "TPM2TOOLS_TCTI": self.tcti})

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def provider(workdir):
    instance = Glewlwyd(os.path.join(workdir, "g2"), dpop=True)
    yield instance
    instance.stop()


@pytest.fixture
def short_provider(workdir):
    """Access tokens of 8 s: tokens expire while the test waits."""
    instance = Glewlwyd(os.path.join(workdir, "g2"), dpop=True, access_ttl=8)
    yield instance
    instance.stop()


@pytest.fixture
def counted_provider(workdir):
    """Glewlwyd behind a CountingFront: `requests("token", "revoke")` is every request it received there."""
    instance = Glewlwyd(os.path.join(workdir, "g2"), dpop=True, counted=True)
    yield instance
    instance.stop()


@pytest.fixture
def swtpm(workdir):
    started = []

    def make(name="tpm"):
        instance = SwTPM(os.path.join(workdir, name))
        started.append(instance)
        return instance

    yield make
    for instance in started:
        instance.stop()


@pytest.fixture
def make_daemon(workdir):
    started = []

    def make(provider, directory=None, **options):
        daemon = DPoPTokend(directory or workdir, provider, **options)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.stop(signal.SIGKILL)


def device_login(daemon, provider):
    process, url = start_login(daemon, "device")
    provider.approve_device(urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["code"][0])
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err, daemon.logs()[-3000:])


def proof(key, provider, nonce=None):
    """A DPoP proof for the provider's token endpoint, signed by `key` (jwcrypto)."""
    from jwcrypto import jwt
    claims = {"jti": str(uuid.uuid4()), "htm": "POST", "htu": provider.token_url, "iat": int(time.time())}
    if nonce:
        claims["nonce"] = nonce
    token = jwt.JWT(header={"typ": "dpop+jwt", "alg": "ES256", "jwk": key.export_public(as_dict=True)}, claims=claims)
    token.make_signed_token(key)
    return token.serialize()


def nonce_refusals(provider):
    return provider.logs().count("oidc_verify_dpop_proof - Invalid nonce")


def test_device_login_binds_the_grant_and_refreshes_with_proofs(provider, make_daemon):
    daemon = make_daemon(provider).start()
    before = daemon.dpop()
    assert (before["keyStorage"], before["binding"], before.get("thumbprint")) == ("state", "none", None), before
    device_login(daemon, provider)
    dpop = daemon.dpop()
    thumbprint = dpop["thumbprint"]
    # Glewlwyd answered token_type DPoP, and its record of the refresh token carries the key's thumbprint.
    assert dpop["binding"] == "verified" and dpop["keyStorage"] == "state" and dpop.get("problem") is None, dpop
    assert daemon.token()["tokenType"] == "DPoP"
    assert provider.refresh_token_thumbprints()[0] == thumbprint
    shown = daemon.ctl("status", "--session", "g2")
    assert f"DPoP key {thumbprint} in the state, binding verified" in shown.stdout, shown
    doctor = daemon.ctl("doctor", "--config", daemon.config)
    assert f"ok    DPoP (g2): key {thumbprint} in the state, binding verified" in doctor.stdout, doctor.stdout
    # The first proof had no nonce: Glewlwyd asked for one and tokend retried once with it.
    assert nonce_refusals(provider) == 1
    for generation in (1, 2, 3, 4):
        reply = daemon.refresh(generation)
        assert "error" not in reply, (reply, daemon.logs()[-2000:])
        assert reply["parameters"]["token"]["generation"] == generation + 1
    # Every new refresh token is bound to the same key; the nonces came with the answers.
    assert set(provider.refresh_token_thumbprints()) == {thumbprint}
    assert provider.refresh_grants() == 4
    assert nonce_refusals(provider) == 1


@pytest.mark.parametrize("pushed", [False, True], ids=["query", "pushed"])
def test_browser_login_binds_the_grant(provider, make_daemon, pushed):
    """With pushed-authorization, the pushed request carries a proof too (Glewlwyd refuses
    one without it from a client that requires DPoP) and the code is bound to the key.
    Glewlwyd's pushed authorization endpoint answers a proof without its current nonce with
    403 invalid_dpop_proof, not use_dpop_nonce: a first push fails until tokend has a nonce from
    the token endpoint, so the pushed case logs in by the device flow first (docs/providers.md)."""
    options = {}
    if pushed:
        # Glewlwyd checks the redirect URI when the request is pushed: a fixed one, registered first.
        options = {"pushed-authorization": True, "redirect-uri": f"http://127.0.0.1:{free_port()}/callback"}
        provider.add_redirect_uri(DPOP_CLIENT_ID, options["redirect-uri"])
    daemon = make_daemon(provider, **options).start()
    if pushed:
        device_login(daemon, provider)
        before = daemon.dpop()["thumbprint"]
    process, start = start_login(daemon, "browser")
    url = authorization_url(start)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    if pushed:
        assert set(query) == {"client_id", "request_uri"}, url
    else:
        provider.add_redirect_uri(DPOP_CLIENT_ID, query["redirect_uri"][0])
    with urllib.request.urlopen(provider.authorize(url), timeout=10) as page:
        assert "Logged in" in page.read().decode()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (out, err, daemon.logs()[-3000:])
    dpop = daemon.dpop()
    assert dpop["binding"] == "verified" and provider.refresh_token_thumbprints()[0] == dpop["thumbprint"], dpop
    if pushed:
        with provider.db() as db:
            (bound,) = db.execute("select gpop_dpop_jkt from gpo_par order by gpop_id desc limit 1").fetchone()
        assert bound == dpop["thumbprint"] != before  # the browser login's own key
    generation = daemon.token()["generation"]
    assert daemon.refresh(generation)["parameters"]["token"]["generation"] == generation + 1


def test_two_hundred_askers_at_expiry_cause_one_refresh(short_provider, make_daemon):
    provider = short_provider
    daemon = make_daemon(provider, **{"refresh-margin": 0, "min-valid": 0}).start()
    device_login(daemon, provider)
    first = daemon.token()
    coalesced = daemon.status()["coalesced"]
    # Glewlwyd is held (stopped) from just before the token expires until every
    # asker has asked: the refresh (the one at expiry, or the first asker's) is
    # surely in flight while they come, and its new token cannot expire before
    # they are answered.
    wait_for(lambda: time.time() > first["expiresAt"] - 2, 20, "the access token's last seconds")
    os.kill(provider.process.pid, signal.SIGSTOP)
    replies = []

    def ask():
        replies.append(daemon.call(B + "GetToken", session="g2")[1])

    threads = [threading.Thread(target=ask) for _ in range(200)]
    try:
        # The token has expired: every asker needs a new one at once.
        wait_for(lambda: time.time() > first["expiresAt"] + 0.5, 20, "the access token to expire")
        for thread in threads:
            thread.start()
        wait_for(lambda: waiting_requests(provider.port), 60, "the refresh to wait at the held provider")
        wait_for(lambda: daemon.status()["coalesced"] - coalesced >= 199, 60,
                 "the askers to join the refresh in flight")
        assert not replies, replies[:3]
    finally:
        os.kill(provider.process.pid, signal.SIGCONT)
    for thread in threads:
        thread.join(60)
    errors = [r for r in replies if "error" in r]
    assert not errors, errors[:3]
    generations = {r["parameters"]["token"]["generation"] for r in replies}
    assert len(replies) == 200 and generations == {2}, [r for r in replies if "parameters" not in r][:3]
    assert provider.refresh_grants() == 1
    # Every asker joined the one refresh, but the first when it was the one to start it.
    joined = daemon.status()["coalesced"] - coalesced
    assert joined in (199, 200), joined
    print(f"200 askers at expiry: 1 refresh, {joined} askers joined it in flight")


def test_a_slow_answer_is_not_taken_for_the_providers_clock(provider, make_daemon):
    """A provider slow to answer (Glewlwyd stopped for 5 s while a refresh waits at it) stamps its
    Date header 5 s after the request left, on a clock no different from tokend's. The next proof's
    iat must stay on that clock: Glewlwyd takes no iat from its future ("Invalid iat", 403
    invalid_dpop_proof), so a delay read as skew (more than the 2 s every iat is set back) costs
    the next refresh."""
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    os.kill(provider.process.pid, signal.SIGSTOP)
    answered = []
    try:
        slow = threading.Thread(target=lambda: answered.append(daemon.refresh(1)))
        slow.start()
        wait_for(lambda: waiting_requests(provider.port), 20, "the refresh to wait at the stopped provider")
        time.sleep(5)  # how slow the provider is: the situation, not a wait for it
    finally:
        os.kill(provider.process.pid, signal.SIGCONT)
    slow.join(30)
    assert answered and "error" not in answered[0], (answered, daemon.logs()[-2000:])
    assert provider.refresh_grants() == 1
    for generation in (2, 3):
        reply = daemon.refresh(generation)
        assert "error" not in reply, (reply, provider.logs().count("oidc_verify_dpop_proof - Invalid iat"))
        assert reply["parameters"]["token"]["generation"] == generation + 1
    assert provider.logs().count("oidc_verify_dpop_proof - Invalid iat") == 0
    assert daemon.dpop().get("problem") is None


FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def test_proofs_follow_the_providers_clock(provider, make_daemon):
    """The provider's clock five minutes ahead of tokend's (Glewlwyd under libfaketime): the first
    proof is refused for its time (Glewlwyd takes an iat up to 60 s old), its answer's Date header
    shows the skew, and every later proof's iat follows the provider's clock."""
    assert os.path.exists(FAKETIME), "libfaketime is not installed (make deps installs faketime)"
    provider.stop()
    provider.environment = {**os.environ, "LD_PRELOAD": FAKETIME, "FAKETIME": "+300"}
    provider.start()
    # Without openid: an ID token from a clock 5 minutes ahead is refused for its iat, as it should be.
    daemon = make_daemon(provider, scope="tokend").start()
    device_login(daemon, provider)
    refused = provider.logs().count("oidc_verify_dpop_proof - Invalid iat")
    assert refused == 1, provider.logs()[-3000:]
    assert daemon.dpop()["binding"] == "verified"
    for generation in (1, 2):
        reply = daemon.refresh(generation)
        assert "error" not in reply, (reply, daemon.logs()[-2000:])
    assert provider.logs().count("oidc_verify_dpop_proof - Invalid iat") == refused


def test_a_captured_refresh_token_is_refused_without_the_key(provider, make_daemon):
    from jwcrypto import jwk
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    captured = daemon.stored_record()["refreshToken"]
    fields = {"grant_type": "refresh_token", "refresh_token": captured}
    bare = provider.token_request(client_id=DPOP_CLIENT_ID, secret=CLIENT_SECRET, **fields)
    assert bare.status == 403 and bare.json()["error"] == "invalid_dpop_proof", (bare.status, bare.body)
    thief = jwk.JWK.generate(kty="EC", crv="P-256")
    other = provider.token_request(client_id=DPOP_CLIENT_ID, secret=CLIENT_SECRET, dpop=proof(thief, provider), **fields)
    assert other.status == 403 and other.json()["error"] == "invalid_dpop_proof", (other.status, other.body)
    # Even with the provider's current nonce, another key is refused.
    nonced = provider.token_request(client_id=DPOP_CLIENT_ID, secret=CLIENT_SECRET,
                                    dpop=proof(thief, provider, nonce="x"), **fields)
    assert nonced.status == 403, (nonced.status, nonced.body)
    assert provider.refresh_grants() == 0
    # The refusals burned nothing: tokend, holding the key, refreshes with that same token.
    reply = daemon.refresh(1)
    assert "error" not in reply, (reply, daemon.logs()[-2000:])
    assert reply["parameters"]["token"]["generation"] == 2 and provider.refresh_grants() == 1


def test_replaying_an_old_refresh_token_still_ends_the_session(provider, make_daemon):
    """What DPoP does not prevent (docs/security.md): Glewlwyd disables the
    chain when a used refresh token comes back, before it judges any proof."""
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    old = daemon.stored_record()["refreshToken"]
    assert "error" not in daemon.refresh(1)
    replay = provider.token_request(client_id=DPOP_CLIENT_ID, secret=CLIENT_SECRET,
                                    grant_type="refresh_token", refresh_token=old)
    assert replay.status == 400, (replay.status, replay.body)
    # Glewlwyd answers the disabled token with a bare 400, which tokend confirms once before it gives up.
    first = daemon.refresh(2)
    assert first.get("error") in (B + "UpstreamUnavailable", B + "LoginRequired"), first
    wait_for(lambda: daemon.status()["state"] == "loginRequired", 30, "the session to need a login")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_restart_keeps_the_key_and_the_session(provider, make_daemon, sig):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    thumbprint = daemon.dpop()["thumbprint"]
    daemon.stop(sig)
    daemon.start()
    assert daemon.dpop()["thumbprint"] == thumbprint
    reply = daemon.refresh(1)
    assert "error" not in reply, (reply, daemon.logs()[-2000:])
    assert reply["parameters"]["token"]["generation"] == 2
    assert provider.refresh_token_thumbprints()[0] == thumbprint


def test_logout_forgets_the_key_and_the_next_login_makes_another(provider, make_daemon):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    first = daemon.dpop()["thumbprint"]
    assert daemon.ctl("logout", "--session", "g2").returncode == 0
    assert "dpopKey" not in daemon.stored_record()
    assert daemon.dpop().get("thumbprint") is None
    device_login(daemon, provider)
    second = daemon.dpop()["thumbprint"]
    assert second != first and provider.refresh_token_thumbprints()[0] == second


def test_a_dpop_session_with_a_shared_store_is_refused_at_start(provider, workdir):
    daemon = DPoPTokend(workdir, provider, **{"shared-store": "postgresql://tokend@127.0.0.1:1/tokend"})
    result = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 78, (result.returncode, result.stderr)
    assert "dpop" in result.stderr and "shared-store" in result.stderr, result.stderr


# --- the key in a TPM ---

def key_blob(daemon):
    stored = daemon.stored_record()["dpopKey"]
    assert stored["storage"] == "tpm"
    material = stored["material"]
    return base64.urlsafe_b64decode(material + "=" * (-len(material) % 4))


def test_tpm_key_is_made_in_the_tpm_and_cannot_leave_it(provider, make_daemon, swtpm, workdir):
    tpm = swtpm()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti).start()
    device_login(daemon, provider)
    dpop = daemon.dpop()
    assert dpop["keyStorage"] == "tpm" and dpop["binding"] == "verified", dpop
    assert provider.refresh_token_thumbprints()[0] == dpop["thumbprint"]
    reply = daemon.refresh(1)
    assert "error" not in reply, (reply, daemon.logs()[-2000:])
    # What the state file keeps is the TPM-wrapped blob: TPM2B_PUBLIC, then TPM2B_PRIVATE.
    blob = key_blob(daemon)
    size = int.from_bytes(blob[:2], "big")
    probe = os.path.join(workdir, "probe")
    os.makedirs(probe)
    with open(os.path.join(probe, "key.pub"), "wb") as f:
        f.write(blob[:2 + size])
    with open(os.path.join(probe, "key.priv"), "wb") as f:
        f.write(blob[2 + size:])
    # tpm2-tools load it under the owner's primary key, made from the same template, and read it back.
    # (swtpm has no resource manager: transient objects are flushed after each tool, as tokend does.)
    for command in (["tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc256:aes128cfb", "-c", "primary.ctx",
                     "-a", "restricted|decrypt|fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda"],
                    ["tpm2_load", "-C", "primary.ctx", "-u", "key.pub", "-r", "key.priv", "-c", "key.ctx"]):
        result = tpm.tools(*command, cwd=probe)
        assert result.returncode == 0, (command, result.stderr)
        assert tpm.tools("tpm2_flushcontext", "-t").returncode == 0
    public = tpm.tools("tpm2_readpublic", "-c", "key.ctx", cwd=probe)
    assert public.returncode == 0, public.stderr
    attributes = public.stdout.split("\nattributes:\n", 1)[1].splitlines()[0]
    assert attributes.strip().startswith("value:"), public.stdout
    flags = set(attributes.split(":", 1)[1].strip().split("|"))
    # noda: its auth is empty, so a TPM in dictionary-attack lockout (caused by anything else) still signs with it.
    assert {"fixedtpm", "fixedparent", "sensitivedataorigin", "sign", "noda"} <= flags, public.stdout
    assert "decrypt" not in flags and "restricted" not in flags, public.stdout
    # The key the TPM holds is the one the provider bound the grant to.
    text = public.stdout
    x = bytes.fromhex(text.split("\nx: ", 1)[1].split()[0])
    y = bytes.fromhex(text.split("\ny: ", 1)[1].split()[0])
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    canonical = json.dumps({"crv": "P-256", "kty": "EC", "x": b64(x), "y": b64(y)}, separators=(",", ":"), sort_keys=True)
    assert b64(hashlib.sha256(canonical.encode()).digest()) == dpop["thumbprint"]


def test_a_tpm_that_stops_answering_costs_no_upstream_call_and_its_return_heals(counted_provider, make_daemon, swtpm):
    provider = counted_provider
    tpm = swtpm()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti).start()
    device_login(daemon, provider)
    grants = provider.refresh_grants()
    sent = provider.requests("token", "revoke")
    assert sent, "the front saw the login's token requests"
    tpm.stop()
    reply = daemon.refresh(1)
    assert reply.get("error") == B + "UpstreamUnavailable" and "TPM" in json.dumps(reply), reply
    wait_for(lambda: "cannot be reached" in (daemon.dpop().get("problem") or ""), 10, "status to name the TPM")
    # Not one request reached the token or revocation endpoint, answered or refused.
    assert provider.requests("token", "revoke") == sent
    assert provider.refresh_grants() == grants
    # The cached token is still handed out: the key is not gone, only out of reach.
    assert daemon.token()["generation"] == 1
    tpm.start()
    wait_for(lambda: "error" not in daemon.refresh(1), 30, "a refresh once the TPM answers")
    assert provider.refresh_grants() == grants + 1
    assert daemon.dpop().get("problem") is None


def test_a_copy_of_the_state_on_another_tpm_cannot_refresh(counted_provider, make_daemon, swtpm, workdir):
    provider = counted_provider
    home = swtpm("home")
    # The state sealed with a state key: the thief copies both.
    key_file = os.path.join(workdir, "state.key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True, text=True,
                               check=True).stdout)
    sealed = [f'state-key-file = "{key_file}"']
    daemon = make_daemon(provider, dpop_key="tpm", tpm=home.tcti, daemon_lines=sealed).start()
    device_login(daemon, provider)
    with open(os.path.join(daemon.state, "g2.session")) as f:
        assert json.load(f)["encryption"] == "aes-256-gcm"
    grants = provider.refresh_grants()
    # The state directory and the state key, copied to a host with another TPM.
    elsewhere = swtpm("elsewhere")
    copy_dir = os.path.join(workdir, "copy")
    os.makedirs(copy_dir)
    shutil.copytree(daemon.state, os.path.join(copy_dir, "state"))
    sent = provider.requests("token", "revoke")
    copy = make_daemon(provider, directory=copy_dir, dpop_key="tpm", tpm=elsewhere.tcti, daemon_lines=sealed).start()
    wait_for(lambda: copy.dpop().get("problem"), 20, "the copy to find its key missing")
    assert copy.dpop()["problem"] == "this session's key is not in this machine's TPM — log in again"
    assert "DPoP: this session's key is not in this machine's TPM — log in again" in copy.ctl("status", "--session", "g2").stdout
    doctor = copy.ctl("doctor", "--config", copy.config)
    assert "FAIL  DPoP (g2): this session's key is not in this machine's TPM" in doctor.stdout, doctor.stdout
    reply = copy.call(B + "GetToken", session="g2")[1]
    assert reply.get("error") == B + "LoginRequired", reply
    assert "not in this machine's TPM" in json.dumps(reply)
    forced = copy.refresh(None)
    assert "error" in forced, forced
    # The user of the copy, told to log in again, logs out (revoking is the default): the copy forgets the
    # session and says it did not revoke, since the grant may be alive where the key is.
    out = copy.ctl("logout", "--session", "g2")
    assert out.returncode == 0, out.stderr
    assert "not revoked" in out.stdout and "provider still holds the grant" in out.stdout, out.stdout
    assert copy.status()["state"] == "loggedOut"
    wait_for(lambda: "refresh token not revoked" in copy.logs(), 10, "the copy's journal to say it did not revoke")
    # The copy sent nothing to the provider's token or revocation endpoint, and the home host's session is unharmed.
    assert provider.requests("token", "revoke") == sent
    assert provider.refresh_grants() == grants
    reply = daemon.refresh(1)
    assert "error" not in reply, (reply, daemon.logs()[-2000:])
    assert provider.refresh_grants() == grants + 1


# --- proofs for resource servers (GetProof) ---

def get_proof(daemon, **parameters):
    reply = varlink_call(daemon.socket, B + "GetProof", {"session": "g2", **parameters})[1]
    if reply.get("error") == "org.varlink.service.MethodNotImplemented":
        # The handler is Sources/TokendServer/ProofMethod.swift; BrokerMethods registers it.
        pytest.skip("GetProof is declared but not registered in this build")
    return reply


def userinfo(provider, token, proof_jwt=None):
    from provider2 import Agent
    headers = {"Authorization": f"DPoP {token}"}
    if proof_jwt:
        headers["DPoP"] = proof_jwt
    return Agent(provider.base).request("GET", provider.issuer + "/userinfo", headers=headers)


def test_get_proof_opens_the_providers_userinfo(provider, make_daemon):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    url = provider.issuer + "/userinfo"
    reply = get_proof(daemon, method="GET", url=url)
    assert "error" not in reply, reply
    proof_jwt, token = reply["parameters"]["proof"], reply["parameters"]["token"]
    assert token["tokenType"] == "DPoP"
    claims = json.loads(base64.urlsafe_b64decode(proof_jwt.split(".")[1] + "=="))
    assert claims["htm"] == "GET" and claims["htu"] == url
    assert claims["ath"] == base64.urlsafe_b64encode(hashlib.sha256(token["accessToken"].encode()).digest()).rstrip(b"=").decode()
    # The token alone opens nothing: it is bound to the key.
    assert userinfo(provider, token["accessToken"]).status == 401
    answer = userinfo(provider, token["accessToken"], proof_jwt)
    if answer.status == 401 and "use_dpop_nonce" in (answer.headers.get("WWW-Authenticate") or ""):
        # The resource server's nonce: one more proof carrying it, as tokend-proxy does.
        nonce = answer.headers["DPoP-Nonce"]
        reply = get_proof(daemon, method="GET", url=url, nonce=nonce)
        assert json.loads(base64.urlsafe_b64decode(reply["parameters"]["proof"].split(".")[1] + "=="))["nonce"] == nonce
        answer = userinfo(provider, reply["parameters"]["token"]["accessToken"], reply["parameters"]["proof"])
    assert answer.status == 200, (answer.status, answer.body, answer.headers)
    assert answer.json()["email"] == "alice@example.test"
    # The same proof again is refused (its jti is spent).
    assert userinfo(provider, token["accessToken"], proof_jwt).status != 200


def test_get_proof_refuses_bad_requests_and_is_rate_limited(provider, make_daemon):
    daemon = make_daemon(provider, session_lines=['proof-targets = ["https://rs.example.test/"]']).start()
    device_login(daemon, provider)
    bad_url = get_proof(daemon, method="GET", url="ftp://example.test/x")
    assert bad_url["error"] == "org.varlink.service.InvalidParameter" and bad_url["parameters"]["parameter"] == "url"
    bad_method = get_proof(daemon, method="G ET", url="https://rs.example.test/x")
    assert bad_method["parameters"]["parameter"] == "method"
    # The bound with the key in the state (tokend(8)): per person and session 200 a second, bursts of 400.
    rate, burst = 200, 400
    call = json.dumps({"method": B + "GetProof", "parameters": {
        "session": "g2", "method": "GET", "url": "https://rs.example.test/x"}}).encode() + b"\0"

    def batch(count=3000, connections=10):
        """`count` calls on `connections` connections, all sent while tokend is stopped,
        so they are there at once. Returns the replies and how long tokend took to answer."""
        sockets = []
        for _ in range(connections):
            sockets.append(socket.socket(socket.AF_UNIX))
            sockets[-1].connect(daemon.socket)
        daemon.process.send_signal(signal.SIGSTOP)
        try:
            for s in sockets:
                s.sendall(call * (count // connections))
        finally:
            released = time.monotonic()
            daemon.process.send_signal(signal.SIGCONT)
        replies = [json.loads(read_frame(s)) for s in sockets for _ in range(count // connections)]
        answering = time.monotonic() - released
        for s in sockets:
            s.close()
        return replies, answering

    # However long tokend takes to answer a batch, it makes at most the burst and
    # `rate` a second of that time, and refuses the rest. A machine too busy to sign
    # faster than the bucket refills refuses none: the next batch comes, until one is.
    deadline = time.monotonic() + 120
    while True:
        replies, answering = batch()
        limited = [r for r in replies if r.get("error") == B + "RateLimited"]
        made = [r for r in replies if "parameters" in r and "proof" in r["parameters"]]
        assert len(limited) + len(made) == len(replies), [r for r in replies if r not in limited and r not in made][:2]
        assert 0 < len(made) <= burst + rate * answering + 1, (len(made), answering)
        if limited:
            break
        assert time.monotonic() < deadline, f"no GetProof refused in 120 s (the last batch: {len(made)} in {answering:.1f} s)"
    assert limited[0]["parameters"]["retryAfter"] >= 1
    print(f"GetProof: {len(made)} of {len(replies)} calls made a proof in {answering:.2f} s, the rest were RateLimited")


# --- clients ---

def tokenctl(daemon, *args, input=None):
    return subprocess.run([os.path.join(BIN, "tokenctl"), *args], input=input, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TOKEND_SOCKET": daemon.socket})


def test_clients_that_send_a_token_alone_refuse_a_dpop_bound_one(provider, make_daemon):
    daemon = make_daemon(provider, **{"git-hosts": ["git.example.test"]}).start()
    device_login(daemon, provider)
    header = tokenctl(daemon, "token", "--session", "g2", "--header")
    assert header.returncode == 1 and header.stdout == "" and "DPoP-bound" in header.stderr, header
    kube = tokenctl(daemon, "kube-credential", "--session", "g2")
    assert kube.returncode == 1 and kube.stdout == "" and "tokenctl proof" in kube.stderr, kube
    git = tokenctl(daemon, "git-credential", "get", input="protocol=https\nhost=git.example.test\n\n")
    assert git.stdout == "" and "DPoP-bound" in git.stderr, git
    # exec says what the token is; the bare token is still there for who knows what to do with it.
    env = tokenctl(daemon, "exec", "--session", "g2", "--", "sh", "-c", 'echo "$TOKEND_TOKEN_TYPE"')
    assert env.returncode == 0 and env.stdout.strip() == "DPoP", env
    assert tokenctl(daemon, "token", "--session", "g2").stdout.strip() == daemon.token()["accessToken"]


def test_token_files_hold_no_dpop_bound_token(provider, make_daemon, workdir):
    runtime = os.path.join(workdir, "run")
    daemon = make_daemon(provider, daemon_lines=[f'runtime-directory = "{runtime}"'],
                         session_lines=['token-files = [{ path = "g2-token" }]']).start()
    device_login(daemon, provider)
    assert daemon.token()["tokenType"] == "DPoP"
    wait_for(lambda: "token files removed: the token is DPoP-bound" in daemon.logs(), 10, "the token files' refusal")
    assert not os.path.exists(os.path.join(runtime, "g2-token"))
    assert daemon.logs().count("token files removed") == 1


def test_tokenctl_proof_prints_both_headers(provider, make_daemon):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    get_proof(daemon, method="GET", url=provider.issuer + "/userinfo")  # skips where GetProof is not registered
    url = provider.issuer + "/userinfo"

    def ask(*nonce):
        result = tokenctl(daemon, "proof", "--session", "g2", "--method", "GET", "--url", url, *nonce)
        assert result.returncode == 0, result
        lines = result.stdout.splitlines()
        assert len(lines) == 2 and lines[0].startswith("Authorization: DPoP ") and lines[1].startswith("DPoP: ")
        return dict(line.split(": ", 1) for line in lines)

    from provider2 import Agent
    answer = Agent(provider.base).request("GET", url, headers=ask())
    if answer.status == 401:
        answer = Agent(provider.base).request("GET", url, headers=ask("--nonce", answer.headers["DPoP-Nonce"]))
    assert answer.status == 200, (answer.status, answer.body)


@pytest.mark.parametrize("library", ["requests", "httpx", "httpx-async"])
def test_python_client_sends_a_proof_with_each_request(provider, make_daemon, library):
    """The Python client's auth classes: `Authorization: DPoP` and a fresh proof per request,
    and one retry with the resource server's nonce when it asks for one."""
    import asyncio

    import httpx
    import requests
    from tokend_client import AsyncTokend, Tokend, httpx_auth, requests_auth
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    get_proof(daemon, method="GET", url=provider.issuer + "/userinfo")  # skips where GetProof is not registered
    url = provider.issuer + "/userinfo"
    statuses = []
    if library == "requests":
        auth = requests_auth.TokendAuth(Tokend(daemon.socket), session="g2")
        for _ in range(3):
            answer = requests.get(url, auth=auth, timeout=10)
            statuses.append((answer.status_code, [r.status_code for r in answer.history], answer.json().get("email")))
    elif library == "httpx":
        with httpx.Client(auth=httpx_auth.TokendAuth(Tokend(daemon.socket), session="g2")) as client:
            for _ in range(3):
                answer = client.get(url)
                statuses.append((answer.status_code, [r.status_code for r in answer.history], answer.json().get("email")))
    else:
        async def three():
            auth = httpx_auth.TokendAuth(async_tokend=AsyncTokend(daemon.socket), session="g2")
            async with httpx.AsyncClient(auth=auth) as client:
                for _ in range(3):
                    answer = await client.get(url)
                    statuses.append((answer.status_code, [r.status_code for r in answer.history],
                                     answer.json().get("email")))
        asyncio.run(three())
    assert [s[0] for s in statuses] == [200, 200, 200], statuses
    assert {s[2] for s in statuses} == {"alice@example.test"}
    # Glewlwyd asks resource-server nonces: at least the first request was answered 401 use_dpop_nonce and retried once.
    assert all(history in ([], [401]) for _, history, _ in statuses) and statuses[0][1] == [401], statuses
