"""Exit codes and the smaller items of issue 54 (item 9): each as tokenctl(1) and
tokend(8) document it. status exits 2 when a session needs a login; a refresh
token the provider refuses is a refused login (8); one handed in while the
endpoint is down is not a success (4); a mistyped key gets "did you mean"; a
non-root tokend that cannot make its state directory is told what to do; and
tokenctl finds a per-user tokend when there is no system one."""
import json
import os
import subprocess

import pytest

from conftest import BIN, free_port, login

TOKEND = os.path.join(BIN, "tokend")
TOKENCTL = os.path.join(BIN, "tokenctl")


def test_status_exits_2_when_a_session_needs_a_login(server, make_tokend):
    daemon = make_tokend(server).start()  # never logged in
    state = json.loads(daemon.ctl("status", "--json").stdout)["state"]
    assert state == "loginRequired", state
    for args in (("status",), ("status", "--json"), ("status", "--session", "default")):
        result = daemon.ctl(*args)
        assert result.returncode == 2, (args, result.returncode, result.stderr)
    login(daemon, server)
    result = daemon.ctl("status")
    assert result.returncode == 0, result.stdout


def test_a_refresh_token_the_provider_refuses_is_a_refused_login(server, make_tokend):
    daemon = make_tokend(server).start()
    result = daemon.ctl("login", input="not-a-refresh-token-the-provider-issued\n")
    assert result.returncode == 8, (result.returncode, result.stderr)
    assert "refused this refresh token" in result.stderr and "tokenctl login" in result.stderr


def test_a_refresh_token_handed_in_while_the_endpoint_is_down_is_not_a_success(server, make_tokend, workdir):
    down = f"http://127.0.0.1:{free_port()}/token"  # nothing listens there
    daemon = make_tokend(server, sessions={"down": {"token-endpoint": down, "client-id": "x",
                                                    "client-auth": "none"}}).start()
    result = daemon.ctl("login", "--session", "down", input="some-refresh-token\n")
    assert result.returncode == 4, (result.returncode, result.stdout, result.stderr)
    assert "stored" in result.stderr and "tokenctl status --session down" in result.stderr


def check_config(workdir, text):
    path = os.path.join(workdir, "typo.toml")
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([TOKEND, "--config", path, "--check-config"], capture_output=True, text=True, timeout=30)


def test_a_mistyped_key_gets_did_you_mean(workdir):
    result = check_config(workdir, '[sessions.default]\ntoken-endpont = "https://idp.example.com/token"\n'
                                   'client-id = "x"\nclient-auth = "none"\n')
    assert result.returncode == 78 and 'did you mean "token-endpoint"' in result.stderr, result.stderr
    far = check_config(workdir, '[sessions.default]\nfavourite-colour = "blue"\n')
    assert far.returncode == 78 and "did you mean" not in far.stderr and "known here" in far.stderr, far.stderr


def test_a_non_root_tokend_that_cannot_make_its_state_directory_is_told_what_to_do(workdir):
    """As user nobody, with a state directory below one only root may write (like /var/lib)."""
    os.chmod(workdir, 0o755)
    roots = os.path.join(workdir, "lib")
    os.mkdir(roots, 0o755)
    config = os.path.join(workdir, "user.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nstate-directory = "{roots}/tokend"\nsocket = "{workdir}/user.sock"\n'
                '[sessions.default]\ntoken-endpoint = "https://idp.example.com/token"\nclient-id = "x"\n'
                'client-auth = "none"\n')
    os.chmod(config, 0o644)
    result = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                             TOKEND, "--config", config], capture_output=True, text=True, timeout=30)
    assert result.returncode == 78, (result.returncode, result.stderr)
    assert f"mkdir {roots}/tokend" in result.stderr and "uid 65534" in result.stderr, result.stderr
    assert "run it as root" in result.stderr and "state-directory" in result.stderr and "--user" in result.stderr


def test_tokenctl_finds_a_per_user_tokend_when_there_is_no_system_one(server, make_tokend, workdir):
    if os.path.exists("/run/tokend/io.tokend.Broker"):
        pytest.skip("this machine has a system tokend, which tokenctl asks first")
    daemon = make_tokend(server)
    runtime = os.path.join(workdir, "run")
    os.makedirs(os.path.join(runtime, "tokend"), 0o700)
    daemon.socket = os.path.join(runtime, "tokend", "io.tokend.Broker")
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace(f'socket = "{workdir}/sock"', f'socket = "{daemon.socket}"'))
    daemon.start()
    env = {k: v for k, v in os.environ.items() if k != "TOKEND_SOCKET"}
    env["XDG_RUNTIME_DIR"] = runtime
    result = subprocess.run([TOKENCTL, "version"], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 0 and f"(at {daemon.socket})" in result.stdout, result.stderr
    env["XDG_RUNTIME_DIR"] = os.path.join(workdir, "elsewhere")
    missing = subprocess.run([TOKENCTL, "version"], capture_output=True, text=True, env=env, timeout=30)
    assert missing.returncode == 3 and "/run/tokend/io.tokend.Broker" in missing.stderr, missing.stderr


def git_fill(workdir, helper):
    """`git credential fill` for https://git.example.com with `helper` first and a
    plain helper after it that answers alice/from-the-next-helper: what git gets."""
    env = {"PATH": os.environ["PATH"], "HOME": workdir, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    nxt = "!f() { echo username=alice; echo password=from-the-next-helper; }; f"
    return subprocess.run(["git", "-c", f"credential.helper={helper}", "-c", f"credential.helper={nxt}",
                           "credential", "fill"], input="protocol=https\nhost=git.example.com\n\n",
                          capture_output=True, text=True, env=env, timeout=60)


def test_git_credential_gives_way_to_the_next_helper_and_exits_0_when_it_has_nothing(server, make_tokend, workdir):
    """git ignores a helper's exit status (gitcredentials(7)); tokenctl git-credential
    exits 0 whenever it has no credential of the moment (tokend unreachable, a login
    required), saying why on stderr, with or without --session, and git takes the
    next helper's. A --session tokend does not know is the helper's configuration,
    refused with 5 (tokenctl(1), EXIT STATUS)."""
    missing = os.path.join(workdir, "no-tokend.sock")
    for session in ([], ["--session", "default"], ["--session", "portal"]):
        alone = subprocess.run([TOKENCTL, "git-credential", "--socket", missing, *session, "get"], capture_output=True,
                               text=True, input="protocol=https\nhost=git.example.com\n\n", timeout=30)
        assert alone.returncode == 0 and alone.stdout == "", (session, alone.returncode, alone.stdout, alone.stderr)
        assert f"tokend is not reachable at {missing}" in alone.stderr, alone.stderr
        filled = git_fill(workdir, f"!{TOKENCTL} git-credential --socket {missing} {' '.join(session)}")
        assert "password=from-the-next-helper" in filled.stdout, filled
        assert "tokend is not reachable" in filled.stderr, filled.stderr
    daemon = make_tokend(server, **{"git-hosts": '["git.example.com"]'}).start()  # not logged in
    needs_login = git_fill(workdir, f"!{TOKENCTL} git-credential --socket {daemon.socket} --session default")
    assert "password=from-the-next-helper" in needs_login.stdout, needs_login
    assert "login" in needs_login.stderr, needs_login.stderr
    unknown = subprocess.run([TOKENCTL, "git-credential", "--socket", daemon.socket, "--session", "nope", "get"],
                             capture_output=True, text=True, input="protocol=https\nhost=git.example.com\n\n", timeout=30)
    assert unknown.returncode == 5 and unknown.stdout == "" and "nope" in unknown.stderr, unknown
    login(daemon, server)
    mine = git_fill(workdir, f"!{TOKENCTL} git-credential --socket {daemon.socket} --session default")
    assert "password=" in mine.stdout and "from-the-next-helper" not in mine.stdout, mine
