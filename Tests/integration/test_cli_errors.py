"""Errors say what is wrong and what to do (issue 54, item 3): a missing
endpoint is the configuration's, not an outage; EACCES on the socket is not
a stopped tokend."""
import os
import subprocess

from conftest import BIN


def test_a_device_login_without_a_device_endpoint_is_a_configuration_problem(server, make_tokend):
    daemon = make_tokend(server).start()  # token endpoint only: no device authorization endpoint
    result = daemon.ctl("login", "--device")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "configuration or the provider's, not an outage" in result.stderr and "[sessions.default]" in result.stderr
    assert "keeps retrying" not in result.stderr


def test_a_socket_this_user_may_not_open_is_not_called_a_stopped_tokend(server, make_tokend):
    """tokend runs; its directory (the test's, 0700) keeps user nobody from the socket: EACCES."""
    daemon = make_tokend(server).start()
    nobody = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                             os.path.join(BIN, "tokenctl"), "token", "--socket", daemon.socket],
                            capture_output=True, text=True, timeout=30)
    assert nobody.returncode == 3 and "permission denied" in nobody.stderr, nobody.stderr
    assert "start tokend.socket" not in nobody.stderr and f"ls -l {daemon.socket}" in nobody.stderr
