"""Advice that fits the session (issue 54, items 3 and 6, after an outside review):
tokend's reasons name the session they are about; a missing login endpoint is
told apart from an outage by its own error (FlowUnavailable), not by words;
tokenctl advises only the login flows the session's endpoints allow; `version`
prints tokenctl's own whatever tokend does; and every call has a deadline."""
import json
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest

from conftest import BIN, free_port
from discovery import Discovery

TOKENCTL = os.path.join(BIN, "tokenctl")


@pytest.fixture
def browser_only(server) -> Iterator[Discovery]:
    """Discovery succeeds; the provider has an authorization endpoint but no device authorization endpoint."""
    provider = Discovery({"token_endpoint": server.token_url,
                          "authorization_endpoint": server.base + "/o/authorize/"})
    yield provider
    provider.close()


def portal(**keys: str) -> dict[str, dict[str, str]]:
    return {"portal": {"client-id": "tokend-test", "client-auth": "none", **keys}}


def test_a_second_sessions_reasons_name_it(server, make_tokend):
    daemon = make_tokend(server, sessions=portal(**{"token-endpoint": server.token_url})).start()
    status = daemon.ctl("status")
    section = status.stdout.split("portal:", 1)[1]
    assert "`tokenctl login --session portal`" in section, status.stdout
    assert "`tokenctl login`" not in section, status.stdout
    last_error = json.loads(daemon.ctl("status", "--json", "--session", "portal").stdout)["lastError"]
    assert "tokenctl login --session portal" in last_error, last_error
    token = daemon.ctl("token", "--session", "portal")
    assert token.returncode == 2 and "`tokenctl login --session portal`" in token.stderr, token.stderr
    doctor = daemon.ctl("doctor", "--session", "portal")
    assert "tokenctl login --session portal" in doctor.stdout and "`tokenctl login`" not in doctor.stdout, doctor.stdout


def test_advice_offers_only_the_flows_the_session_has(server, make_tokend):
    sessions = portal(**{"token-endpoint": server.token_url})
    sessions["web"] = {"client-id": "tokend-test", "client-auth": "none", "token-endpoint": server.token_url,
                       "authorization-endpoint": server.base + "/o/authorize/"}
    daemon = make_tokend(server, sessions=sessions).start()
    for args in (("status", "--session", "portal"), ("token", "--session", "portal"), ("doctor", "--session", "portal")):
        result = daemon.ctl(*args)
        said = result.stdout + result.stderr
        assert "--device" not in said and "--browser" not in said, (args, said)
        assert "--refresh-token-file" in said, (args, said)
    assert json.loads(daemon.ctl("status", "--json", "--session", "portal").stdout)["loginFlows"] == []
    for args in (("status", "--session", "web"), ("token", "--session", "web")):
        result = daemon.ctl(*args)
        said = result.stdout + result.stderr
        assert "tokenctl login --session web --browser" in said and "--device" not in said, (args, said)


def test_a_provider_without_a_device_endpoint_is_not_an_outage(server, make_tokend, browser_only):
    daemon = make_tokend(server, sessions=portal(issuer=browser_only.issuer)).start()
    result = daemon.ctl("login", "--session", "portal", "--device")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "no device authorization endpoint" in result.stderr and "--browser" in result.stderr, result.stderr
    assert "not an outage" in result.stderr and "[sessions.portal]" in result.stderr, result.stderr
    assert "token endpoint is unavailable" not in result.stderr and "keeps retrying" not in result.stderr
    flows = json.loads(daemon.ctl("status", "--json", "--session", "portal").stdout)["loginFlows"]
    assert flows == ["browser"], flows


def test_a_provider_whose_discovery_fails_is_an_outage(server, make_tokend):
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    daemon = make_tokend(server, sessions=portal(issuer=down)).start()
    result = daemon.ctl("login", "--session", "portal", "--device")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert "has not succeeded" in result.stderr and "token endpoint is unavailable" not in result.stderr, result.stderr
    assert json.loads(daemon.ctl("status", "--json", "--session", "portal").stdout).get("loginFlows") is None


@pytest.fixture
def silent_socket(workdir) -> Iterator[str]:
    """A socket that accepts connections (the kernel queues them) and never answers: a wedged tokend."""
    path = os.path.join(workdir, "silent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    yield path
    listener.close()


def ctl(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOKENCTL, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def test_version_prints_tokenctls_own_when_tokend_is_down_or_silent(workdir, silent_socket):
    own = ctl("--version").stdout.strip().split()[-1]
    down = ctl("version", "--socket", os.path.join(workdir, "nothing-here.sock"))
    assert down.returncode == 3, (down.returncode, down.stderr)
    assert f"tokenctl {own}" in down.stdout and "tokend unknown: tokend is not reachable" in down.stdout, down.stdout
    silent = ctl("version", "--socket", silent_socket, "--json")
    assert silent.returncode == 3, (silent.returncode, silent.stderr)
    answer = json.loads(silent.stdout)
    assert answer["tokenctl"] == own and answer["tokend"] is None and "does not answer" in answer["tokendUnknown"]


def test_a_call_to_a_tokend_that_never_answers_ends_at_its_deadline(silent_socket):
    for args in (("token",), ("sessions",), ("logout",)):
        result = ctl(*args, "--socket", silent_socket, timeout=30, TOKENCTL_TIMEOUT="2")
        assert result.returncode == 3, (args, result.returncode, result.stderr)
        assert "did not answer within 2 s (TOKENCTL_TIMEOUT)" in result.stderr, (args, result.stderr)


def test_a_redirect_uri_the_session_does_not_take_names_the_session(server, make_tokend):
    """A session with a fixed redirect-uri refuses a browser login to another
    URI; the fix it names logs that session in (tokenctl listens at the
    session's redirect-uri by itself), not the default one."""
    own = f"http://127.0.0.1:{free_port()}/callback"
    other = f"http://127.0.0.1:{free_port()}/callback"
    daemon = make_tokend(server, sessions=portal(**{"token-endpoint": server.token_url, "redirect-uri": own,
                                                    "authorization-endpoint": server.base + "/o/authorize/"})).start()
    refused = daemon.ctl("login", "--session", "portal", "--browser", "--no-open", "--redirect-uri", other)
    assert refused.returncode == 8, (refused.returncode, refused.stderr)
    assert own in refused.stderr and "tokenctl login --session portal --browser" in refused.stderr, refused.stderr
    assert "tokenctl login --browser" not in refused.stderr, refused.stderr
    # The named fix begins a login at the session's own redirect URI.
    process = subprocess.Popen([TOKENCTL, "login", "--session", "portal", "--browser", "--no-open",
                                "--socket", daemon.socket], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = ""
        while not start.startswith("http"):
            line = process.stdout.readline()
            assert line, process.stderr.read()
            start = line.strip()
        assert start.startswith(own.removesuffix("/callback")), (start, own)
    finally:
        process.terminate()
        process.wait(20)
