"""A TPM that is there but does not serve: stopped mid-session (swtpm
SIGSTOPped: it takes the connection and never answers) and in
dictionary-attack lockout. Neither is a key that is gone: the session says the
TPM is unreachable or locked out, sends nothing upstream, and heals when the TPM
serves again. The fixtures are test_dpop's (Glewlwyd with DPoP, swtpm)."""
import base64
import hashlib
import json
import os
import signal
import socket
import time

from conftest import read_frame, wait_for
from test_dpop import (B, DPoPTokend, counted_provider, device_login, key_blob, make_daemon, provider,  # noqa: F401
                       swtpm)

# What a TPM signature may take before the session calls the TPM unreachable (WatchedProofKey.signingDeadline).
SIGNING_DEADLINE = 5


def call(path, method, parameters, timeout):
    """One Varlink call; None when no answer comes within `timeout` seconds."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps({"method": method, "parameters": parameters}).encode() + b"\0")
        try:
            return json.loads(read_frame(s))
        except (socket.timeout, TimeoutError):
            return None


def get_proof(daemon, provider, timeout):
    return call(daemon.socket, B + "GetProof",
                {"session": "g2", "method": "GET", "url": provider.issuer + "/userinfo"}, timeout)


def test_a_tpm_that_never_answers_is_reported_within_the_deadline_and_heals(counted_provider, make_daemon, swtpm):
    provider = counted_provider
    tpm = swtpm()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti).start()
    device_login(daemon, provider)
    assert "error" not in get_proof(daemon, provider, 20)
    sent = provider.requests("token", "revoke")
    os.kill(tpm.process.pid, signal.SIGSTOP)
    try:
        # The signature that hangs is given up after the deadline; the refresh answers with the TPM's name.
        started = time.monotonic()
        reply = call(daemon.socket, B + "Refresh", {"session": "g2", "staleGeneration": 1}, SIGNING_DEADLINE + 20)
        took = time.monotonic() - started
        assert reply is not None, "Refresh never answered"
        assert reply.get("error") == B + "UpstreamUnavailable" and "TPM" in json.dumps(reply), reply
        print(f"Refresh with the TPM stopped answered in {took:.1f} s")
        # Calls after it do not queue behind the hung one: GetProof answers at once, naming the TCTI.
        started = time.monotonic()
        reply = get_proof(daemon, provider, SIGNING_DEADLINE + 20)
        took = time.monotonic() - started
        assert reply is not None, "GetProof never answered"
        assert reply.get("error") == B + "KeyUnavailable", reply
        assert tpm.tcti in reply["parameters"]["reason"] and "has not answered" in reply["parameters"]["reason"], reply
        assert took < SIGNING_DEADLINE + 2, took
        print(f"GetProof with the TPM stopped answered in {took:.2f} s")
        problem = daemon.dpop().get("problem") or ""
        assert "TPM" in problem and "not in this machine's TPM" not in problem, problem
        # The key is not gone: the cached token is still handed out.
        assert daemon.token()["generation"] == 1
        assert provider.requests("token", "revoke") == sent
    finally:
        os.kill(tpm.process.pid, signal.SIGCONT)
    wait_for(lambda: "error" not in (get_proof(daemon, provider, 20) or {"error": "none"}), 30, "a proof once the TPM answers")
    wait_for(lambda: daemon.dpop().get("problem") is None, 10, "status to clear the TPM's problem")
    # The failed refresh backs off (retryAfter); the next one after it goes through.
    wait_for(lambda: "error" not in daemon.refresh(1), 30, "a refresh once the TPM answers")
    assert len(provider.requests("token")) > len([r for r in sent if "/token" in r[1]])


def lock_out(tpm, workdir):
    """Dictionary-attack lockout, as a few wrong passwords for any DA-protected object cause it."""
    probe = os.path.join(workdir, "lockout-probe")
    os.makedirs(probe, exist_ok=True)
    assert tpm.tools("tpm2_dictionarylockout", "-s", "-n", "1", "-t", "600", "-l", "600").returncode == 0
    assert tpm.tools("tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "p.ctx", "-p", "good", cwd=probe).returncode == 0
    tpm.tools("tpm2_flushcontext", "-t")
    wrong = tpm.tools("tpm2_create", "-C", "p.ctx", "-P", "wrong", "-G", "ecc", "-u", "x.pub", "-r", "x.priv", cwd=probe)
    assert wrong.returncode != 0
    tpm.tools("tpm2_flushcontext", "-t")
    assert "inLockout:                 1" in tpm.tools("tpm2_getcap", "properties-variable").stdout


def end_lockout(tpm):
    assert tpm.tools("tpm2_dictionarylockout", "--clear-lockout").returncode == 0
    assert "inLockout:                 0" in tpm.tools("tpm2_getcap", "properties-variable").stdout


def test_a_tpm_in_lockout_still_signs_with_the_sessions_key(provider, make_daemon, swtpm, workdir):
    tpm = swtpm()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti).start()
    device_login(daemon, provider)
    grants = provider.refresh_grants()
    lock_out(tpm, workdir)
    # The key and its primary are noDA (empty auth: nothing to guess), so lockout does not touch them.
    reply = daemon.refresh(1)
    assert "error" not in reply, reply
    assert provider.refresh_grants() == grants + 1
    assert daemon.dpop()["problem"] is None


def old_key(tpm, workdir):
    """A key made as tokend made them before noDA: the primary and the key without it. Returns the
    state's material (TPM2B_PUBLIC || TPM2B_PRIVATE) and its RFC 7638 thumbprint."""
    probe = os.path.join(workdir, "old-key")
    os.makedirs(probe, exist_ok=True)
    for command in (["tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc256:aes128cfb", "-c", "primary.ctx"],
                    ["tpm2_create", "-C", "primary.ctx", "-G", "ecc256:ecdsa-sha256", "-u", "key.pub", "-r", "key.priv",
                     "-a", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign"],
                    ["tpm2_load", "-C", "primary.ctx", "-u", "key.pub", "-r", "key.priv", "-c", "key.ctx"]):
        result = tpm.tools(*command, cwd=probe)
        assert result.returncode == 0, (command, result.stderr)
        assert tpm.tools("tpm2_flushcontext", "-t").returncode == 0
    public = tpm.tools("tpm2_readpublic", "-c", "key.ctx", cwd=probe)
    assert public.returncode == 0 and "noda" not in public.stdout, public.stdout
    tpm.tools("tpm2_flushcontext", "-t")
    x = bytes.fromhex(public.stdout.split("\nx: ", 1)[1].split()[0])
    y = bytes.fromhex(public.stdout.split("\ny: ", 1)[1].split()[0])
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    canonical = json.dumps({"crv": "P-256", "kty": "EC", "x": b64(x), "y": b64(y)}, separators=(",", ":"), sort_keys=True)
    with open(os.path.join(probe, "key.pub"), "rb") as f, open(os.path.join(probe, "key.priv"), "rb") as g:
        material = f.read() + g.read()
    return b64(material), b64(hashlib.sha256(canonical.encode()).digest())


def test_lockout_with_a_key_made_before_noda_is_temporary_not_a_missing_key(provider, make_daemon, swtpm, workdir):
    tpm = swtpm()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti).start()
    device_login(daemon, provider)
    daemon.stop()
    # The session's key replaced by one made the old way (the grant stays bound to the first key: nothing in
    # this test goes upstream with the old key, GetProof only signs).
    material, thumbprint = old_key(tpm, workdir)
    path = os.path.join(daemon.state, "g2.session")
    with open(path) as f:
        state = json.load(f)
    state["record"]["dpopKey"].update({"material": material, "thumbprint": thumbprint})
    with open(path, "w") as f:
        json.dump(state, f)
    daemon.start()
    assert key_blob(daemon) == base64.urlsafe_b64decode(material + "=" * (-len(material) % 4))
    wait_for(lambda: "error" not in get_proof(daemon, provider, 20), 20, "the old key to sign")
    lock_out(tpm, workdir)
    reply = get_proof(daemon, provider, 20)
    assert reply.get("error") == B + "KeyUnavailable", reply
    assert "lockout" in reply["parameters"]["reason"], reply
    wait_for(lambda: "lockout" in (daemon.dpop().get("problem") or ""), 10, "status to say the TPM is locked out")
    problem = daemon.dpop()["problem"]
    assert "not in this machine's TPM" not in problem, problem
    # Not a lost key: the cached token is still handed out, and the lockout's end heals the session.
    assert daemon.token()["generation"] == 1
    end_lockout(tpm)
    wait_for(lambda: "error" not in get_proof(daemon, provider, 20), 20, "a proof once the lockout ends")
    wait_for(lambda: daemon.dpop().get("problem") is None, 10, "status to clear the lockout")
