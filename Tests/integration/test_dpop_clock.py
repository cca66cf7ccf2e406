"""A provider's clock is followed only within six minutes (ProofServers.followedSkew): Glewlwyd
under libfaketime a day ahead no longer post-dates tokend's proofs, its own endpoints' and those
for resource servers on its origin alike; its refusal is named in status with the skew."""
import base64
import json
import os
import time

from conftest import wait_for
from test_dpop import FAKETIME, device_login, get_proof, make_daemon, provider  # noqa: F401 (fixtures)


def claims(jwt):
    return json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))


def test_a_provider_clock_a_day_ahead_is_named_not_followed(provider, make_daemon):
    assert os.path.exists(FAKETIME), "libfaketime is not installed (make deps installs faketime)"
    daemon = make_daemon(provider, scope="tokend").start()
    device_login(daemon, provider)
    provider.stop()
    provider.environment = {**os.environ, "LD_PRELOAD": FAKETIME, "FAKETIME": "+1d"}
    provider.start()
    grants = provider.refresh_grants()
    # The refresh meets the clock a day ahead: its proof (this host's time) is refused, and its answer's
    # Date shows the skew, which the next proof does not follow.
    first = daemon.refresh(1)
    assert "error" in first, first
    second = daemon.refresh(1)
    assert "error" in second, second
    assert provider.refresh_grants() == grants
    problem = daemon.dpop().get("problem") or ""
    assert "refused the DPoP proof" in problem, daemon.dpop()
    assert "s ahead of this host's" in problem and "more than the 360 s proofs follow" in problem, problem
    ahead = int(problem.split("the provider's clock is ")[1].split(" s ")[0])
    assert abs(ahead - 86400) <= 5, problem
    # Every proof Glewlwyd saw, and GetProof's for its userinfo, keep this host's time.
    before = time.time()
    reply = get_proof(daemon, method="GET", url=provider.issuer + "/userinfo")
    assert "error" not in reply, reply
    iat = claims(reply["parameters"]["proof"])["iat"]
    assert before - 10 <= iat <= time.time() + 1, (iat, before)
    # The clock set right, the next refresh (once the session's back-off has passed) succeeds, and the
    # problem is gone.
    provider.stop()
    provider.environment = dict(os.environ)
    provider.start()
    wait_for(lambda: "error" not in daemon.refresh(1), 60, "a refresh with the clocks agreeing")
    assert provider.refresh_grants() == grants + 1
    wait_for(lambda: not daemon.dpop().get("problem"), 10, "the DPoP problem to clear")
