# Over 90 s of `make test` on a busy 2-core machine (docs/testing.md; 233 s at load 12-15, 62 s quiet): it
# runs every tokenctl subcommand's help twice or more, each a process start, and a tokend for each that acts.
"""One set of conventions across tokenctl's commands (issue 54; written down in
tokenctl(1), CONVENTIONS), held by walking every subcommand tokenctl's help
lists: -h and --help answer offline; every command that reads has --json;
--session only where it acts, and a name tokend does not know is refused
(exit 5); --version on every binary, and `tokenctl version` shows tokend's."""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, login

TOKENCTL = os.path.join(BIN, "tokenctl")


def run(*args, env=None, input=None, timeout=30):
    return subprocess.run([TOKENCTL, *args], capture_output=True, text=True, env=env, input=input,
                          timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)


def subcommands(path=()):
    """Every command path tokenctl's help lists, nested ones (share create) included."""
    text = run(*path, "--help").stdout
    if "SUBCOMMANDS:" not in text:
        return [path]
    names = re.findall(r"^  ([a-z][a-z-]+)\s", text.split("SUBCOMMANDS:")[1], re.M)
    found = []
    for name in names:
        if name != "help":
            found += subcommands(path + (name,))
    return found


COMMANDS = subcommands()
# The commands that read (print what tokend or this machine holds).
READERS = [("token",), ("status",), ("sessions",), ("cookies",), ("share", "list"), ("version",), ("doctor",),
           ("login",), ("access",), ("add",)]  # watch prints tokend's events, JSON only
# The commands that act on no one session: no --session to ignore.
SESSIONLESS = [("sessions",), ("metrics",), ("share", "list"), ("share", "revoke"), ("version",),
               ("browser-bridge",)]
# What each command that takes --session needs besides it to get as far as asking tokend.
ARGUMENTS = {
    ("cookies",): ["https://app.example.com/"], ("exec",): ["--", "true"], ("git-credential",): ["get"],
    ("proof",): ["--method", "GET", "--url", "https://api.example.com/"], ("share", "create"): ["SHARE"],
}
# Commands whose --session is not a call to tokend naming it (they start and wait, or read files).
NOT_CALLED = {("agent",): "a desktop agent that waits on the session bus", ("login",): "checked below with input",
              ("doctor",): "checks this machine; an unknown session is one of its findings"}


def test_the_walk_finds_every_command():
    assert len(COMMANDS) >= 20 and ("share", "create") in COMMANDS and ("exec",) in COMMANDS, COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_help_answers_offline(path, workdir):
    env = {"PATH": os.environ["PATH"], "HOME": workdir, "TOKEND_SOCKET": os.path.join(workdir, "none")}
    for flag in ("-h", "--help"):
        result = run(*path, flag, env=env)
        assert result.returncode == 0 and "USAGE:" in result.stdout, (path, flag, result.stderr)


@pytest.mark.parametrize("path", READERS, ids=[" ".join(p) for p in READERS])
def test_every_reading_command_has_json(path):
    assert path in COMMANDS
    assert "--json" in run(*path, "--help").stdout, path


def test_every_command_with_json_is_a_reader():
    """The list above is every command whose help offers --json, so tokenctl(1)'s list (checked
    below) cannot miss one (add's and access's were missed once)."""
    offered = [p for p in COMMANDS if "--json" in run(*p, "--help").stdout]
    assert sorted(offered) == sorted(READERS), (offered, READERS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_session_only_where_it_acts_and_an_unknown_one_is_refused(path, request, make_tokend, workdir):
    offered = "--session" in run(*path, "--help").stdout
    if path in SESSIONLESS:
        assert not offered, f"{' '.join(path)} acts on no one session, yet offers --session"
        return
    if not offered or path in NOT_CALLED:
        return
    server = request.getfixturevalue("server")  # started only for the commands that call tokend
    daemon = make_tokend(server).start()
    login(daemon, server)
    extra = [os.path.join(workdir, a) if a == "SHARE" else a for a in ARGUMENTS.get(path, [])]
    result = run(*path, "--socket", daemon.socket, "--session", "nope", *extra, input="")
    assert result.returncode == 5, (path, result.returncode, result.stdout, result.stderr)


def test_login_refuses_an_unknown_session(server, make_tokend):
    daemon = make_tokend(server).start()
    status, grant = server.password_grant()
    result = daemon.ctl("login", "--session", "nope", input=grant["refresh_token"] + "\n")
    assert result.returncode == 5, result.stderr


@pytest.mark.parametrize("binary", ["tokend", "tokenctl", "tokend-proxy", "tokend-native-host"])
def test_every_binary_has_version(binary):
    result = subprocess.run([os.path.join(BIN, binary), "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+\n", result.stdout), (binary, result)


@pytest.mark.parametrize("binary", ["tokend", "tokenctl", "tokend-proxy", "tokend-native-host"])
def test_every_binary_answers_help_offline(binary, workdir):
    """-h and --help on every binary: its usage, exit 0, with nothing to talk to (tokend-native-host
    once took --help for a caller's origin and refused it)."""
    env = {"PATH": os.environ["PATH"], "HOME": workdir, "TOKEND_SOCKET": os.path.join(workdir, "none")}
    for flag in ("-h", "--help"):
        result = subprocess.run([os.path.join(BIN, binary), flag], capture_output=True, text=True, timeout=30, env=env)
        assert result.returncode == 0 and "USAGE:" in result.stdout.upper(), (binary, flag, result)
        assert result.stderr == "", (binary, flag, result.stderr)


def test_version_shows_tokends_too(server, make_tokend):
    daemon = make_tokend(server).start()
    mine = run("--version").stdout.strip()
    theirs = subprocess.run([os.path.join(BIN, "tokend"), "--version"], capture_output=True, text=True).stdout.strip()
    result = daemon.ctl("version", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"tokenctl": mine, "tokend": theirs}
    assert f"tokend {theirs}" in daemon.ctl("version").stdout


def test_json_covers_every_session_unless_one_is_named(server, make_tokend):
    """status --json and sessions --json: one object per session, the same sessions."""
    daemon = make_tokend(server, sessions={"other": {"token-endpoint": server.token_url, "client-id": "x",
                                                     "client-auth": "none"}}).start()
    login(daemon, server)
    lines = [json.loads(l) for l in daemon.ctl("status", "--json").stdout.splitlines()]
    assert sorted(s["session"] for s in lines) == ["default", "other"], lines
    listed = [json.loads(l) for l in daemon.ctl("sessions", "--json").stdout.splitlines()]
    assert sorted(s["session"] for s in listed) == ["default", "other"]
    assert set(listed[0]) <= {"session", "state", "generation", "expiresAt"}, "a summary, not the whole status"
    one = [json.loads(l) for l in daemon.ctl("status", "--session", "other", "--json").stdout.splitlines()]
    assert [s["session"] for s in one] == ["other"]


def test_token_json_names_the_generation(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    token = json.loads(daemon.ctl("token", "--json").stdout)
    assert token["generation"] == 1 and token["accessToken"] and token["tokenType"] == "Bearer"


def test_the_conventions_and_troubleshooting_are_written_down():
    """tokenctl(1) names each convention this file holds; tokenctl(1), tokend(8) and tokend-proxy(1)
    have a TROUBLESHOOTING section, and tokenctl's names every exit code but 0, 64, 127 and 130."""
    from test_manuals import page_text
    text = page_text("tokenctl.1")
    conventions = " ".join(text.split("CONVENTIONS")[1].split("COMMANDS")[0].split())
    for named in ["-h and --help", "offline", "--json", "every session", "--session names one", '"0600"', "RFC 3339",
                  "refused (exit 5)", "--version on every binary", "tokenctl version"]:
        assert named in conventions, named
    listed = conventions.split("on every command that reads (")[1].split(")")[0].split(", ")
    assert sorted(listed) == sorted(" ".join(p) for p in READERS), listed
    for named in ['"10:42" today', '"2026-05-28 10:42" on another day', '"10:42 (in 5 min)"']:
        assert named in conventions, named
    for page in ("tokenctl.1", "tokend.8", "tokend-proxy.1"):
        assert "TROUBLESHOOTING" in page_text(page), page
    trouble = text.split("TROUBLESHOOTING")[1].split("SEE ALSO")[0]
    assert [c for c in range(1, 10) if f"[{c}]" not in trouble] == []


RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_json_times_are_rfc3339_everywhere(server, make_tokend, workdir):
    """Every time a --json prints is RFC 3339 text, and no Unix integer is left under a time's name."""
    daemon = make_tokend(server).start()
    result = daemon.ctl("login", "--json", input=server.password_grant()[1]["refresh_token"] + "\n")
    assert result.returncode == 0, result.stderr
    printed = {"login": [json.loads(result.stdout)]}
    for path in (("token",), ("status",), ("sessions",), ("share", "list")):
        if path == ("share", "list"):
            assert run("share", "create", "--socket", daemon.socket, os.path.join(workdir, "s.sock")).returncode == 0
        result = run(*path, "--socket", daemon.socket, "--json")
        assert result.returncode == 0, (path, result.stderr)
        printed[" ".join(path)] = [json.loads(line) for line in result.stdout.splitlines()]
    times = {}
    for command, objects in printed.items():
        for o in objects:
            for key, value in o.items():
                if key.endswith("At") or key.endswith("Since"):
                    times[f"{command} {key}"] = value
    for name in ("login expiresAt", "token expiresAt", "status expiresAt", "status lastRefreshAt",
                 "sessions expiresAt", "share list expiresAt"):
        assert name in times, (name, printed)
    assert {n: v for n, v in times.items() if not (v is None or isinstance(v, str) and RFC3339.fullmatch(v))} == {}


def test_doctor_json_is_one_object_per_check(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    result = daemon.ctl("doctor", "--json", "--config", daemon.config)
    checks = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(checks) >= 4, result.stdout
    assert all(c["outcome"] in ("ok", "warn", "FAIL", "skip") and c["check"] and "detail" in c for c in checks)
    assert any(c["check"] == "session default" and c["outcome"] == "ok" for c in checks), checks


@pytest.mark.parametrize("path", [("status",), ("doctor",), ("agent",)])
def test_session_help_states_the_real_default(path):
    """status, doctor and agent cover every session unless --session names one; their help says so."""
    text = " ".join(run(*path, "--help").stdout.split())
    assert "--session <session> Only this session (default: every session this user may read" in text, text


def test_git_credential_honours_session(server, make_tokend):
    """Two sessions list the same host: --session picks which one's token git gets."""
    daemon = make_tokend(server, **{"git-hosts": '["git.example.com"]'},
                         sessions={"other": {"token-endpoint": server.token_url, "client-id": "x",
                                             "client-auth": "none", "git-hosts": ["git.example.com"]}}).start()
    login(daemon, server)
    request = "protocol=https\nhost=git.example.com\n\n"
    default = run("git-credential", "--socket", daemon.socket, "--session", "default", "get", input=request)
    assert default.returncode == 0 and "password=" in default.stdout, default.stderr
    other = run("git-credential", "--socket", daemon.socket, "--session", "other", "get", input=request)
    assert other.returncode == 0 and "password=" not in other.stdout, "other has no token: no answer from it"
