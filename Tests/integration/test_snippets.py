"""What a reader copies works (issue 54): every configuration in README.md,
docs/*.md and the man pages passes `tokend --check-config`, and so does the
shipped etc/tokend/tokend.toml; every tokenctl command there is accepted by
tokenctl's argument parser; and README's quick start, followed literally with a
provider that has a public client, gives a running tokend that logs in."""
import os
import re
import subprocess
import tomllib

import pytest

from conftest import BIN, BROWSER, ROOT, AuthServer, wait_for
import snippets

CONFIGS = snippets.configs()
COMMANDS = snippets.commands()


def test_there_are_snippets_to_check():
    assert len(CONFIGS) >= 10 and len(COMMANDS) >= 15, (CONFIGS, COMMANDS)
    assert any(c.where.startswith("README.md") for c in CONFIGS)


def check_config(path):
    return subprocess.run([os.path.join(BIN, "tokend"), "--check-config", "--config", path],
                          capture_output=True, text=True, timeout=30)


def test_the_shipped_configuration_is_valid():
    run = check_config(os.path.join(ROOT, "etc", "tokend", "tokend.toml"))
    assert run.returncode == 0, run.stderr


def quick_start():
    return next(c for c in CONFIGS if c.where.startswith("README.md"))


def files_for(text, directory):
    """The snippet with its /etc/tokend files made in `directory` (a secret, a
    P-256 key, a state key, each 0600) and placeholders filled in."""
    os.makedirs(directory, exist_ok=True)
    for path in sorted(set(re.findall(r'"/etc/tokend/([\w.-]+)"', text))):
        target = os.path.join(directory, path)
        if path.endswith(".key") and "state" not in path:
            subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-out", target], check=True, capture_output=True)
            os.chmod(target, 0o600)
            continue
        content = subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True,
                                 text=True, check=True).stdout if "state" in path else "a-client-secret-of-at-least-32-bytes\n"
        with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(content)
    return text.replace("/etc/tokend/", directory + "/").replace(":PORT/", ":9000/")


@pytest.mark.parametrize("snippet", CONFIGS, ids=[c.where for c in CONFIGS])
def test_every_configuration_snippet_is_valid(snippet, workdir):
    """A fragment (a [daemon] table, or a session with no client-id: the
    text around it says it adds to a session) is checked on top of README's
    quick start."""
    text = snippet.text
    if not re.search(r"^\[sessions\.", text, re.M):
        text = snippets.merged(quick_start().text, text)
    elif "client-id" not in text:
        table = tomllib.loads(text)
        provider = tomllib.loads(quick_start().text)["sessions"]["default"]
        for session in table["sessions"].values():
            if "client-id" not in session:
                session.update({k: v for k, v in provider.items() if k not in session})
        text = snippets.dump(table)
    path = os.path.join(workdir, "tokend.toml")
    with open(path, "w") as f:
        f.write(files_for(text, os.path.join(workdir, "etc")))
    run = check_config(path)
    assert run.returncode == 0, f"{snippet.where}: {run.stderr}\n{text}"


@pytest.mark.parametrize("snippet", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_tokenctl_command_snippet_parses(snippet, workdir):
    """Run against a socket that is not there, with a home of its own and no
    input: whatever it then says, it is not a usage error (64)."""
    import shlex
    argv = shlex.split(snippet.text)
    nowhere = os.path.join(workdir, "no-tokend")
    argv = [nowhere if previous == "--socket" else word for previous, word in zip([None] + argv, argv)]
    env = {"PATH": os.environ["PATH"], "HOME": workdir, "TOKEND_SOCKET": nowhere, "XDG_RUNTIME_DIR": workdir,
           "DBUS_SESSION_BUS_ADDRESS": "unix:path=" + nowhere}
    try:
        run = subprocess.run([os.path.join(BIN, "tokenctl"), *argv[1:]], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, env=env, cwd=workdir, timeout=20)
    except subprocess.TimeoutExpired:
        return  # it parsed, and went on to wait for something
    assert run.returncode != 64 and "Error:" not in run.stderr, f"{snippet.where}: {snippet.text}\n{run.stderr}"


def start_login(daemon, flow):
    process = subprocess.Popen([os.path.join(BIN, "tokenctl"), "login", f"--{flow}", "--socket", daemon.socket],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    while True:
        line = process.stdout.readline()
        assert line, f"tokenctl ended early: {''.join(printed)} {process.stderr.read()}"
        printed.append(line)
        if line.strip().startswith("http"):
            return process, line.strip()


@pytest.fixture
def public_provider(workdir):
    instance = AuthServer(os.path.join(workdir, "as"), extra=["--oidc"])
    yield instance
    instance.stop()


@BROWSER
def test_the_quick_start_followed_literally_runs_and_logs_in(public_provider, workdir):
    """README's session, with the test provider's issuer and its public client
    (tokend-browser) put in, and tokend's socket and state under workdir: it
    passes --check-config, tokend runs on it, `tokenctl login --browser` logs
    in, and `tokenctl token` prints a token."""
    from browser import Browser
    session = quick_start().text.replace("https://id.example.com", public_provider.issuer)
    session = session.replace('"my-app"', '"tokend-browser"')
    assert session.count(public_provider.issuer) == 1 and '"tokend-browser"' in session
    socket_path, config = os.path.join(workdir, "sock"), os.path.join(workdir, "tokend.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nsocket = "{socket_path}"\nstate-directory = "{workdir}/state"\n\n' + session)
    assert check_config(config).returncode == 0
    with open(os.path.join(workdir, "tokend.log"), "w") as log:
        tokend = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", config], stdout=log, stderr=log)
    browser = None
    try:
        wait_for(lambda: os.path.exists(socket_path) or tokend.poll() is not None, 20, "tokend's socket")
        assert tokend.poll() is None, open(os.path.join(workdir, "tokend.log")).read()

        class Daemon:
            socket = socket_path
        process, start = start_login(Daemon, "browser")
        browser = Browser()
        page = browser.authorize(start)
        assert "Logged in" in page
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        token = subprocess.run([os.path.join(BIN, "tokenctl"), "token", "--socket", socket_path],
                               capture_output=True, text=True, timeout=30)
        assert token.returncode == 0 and len(token.stdout.strip()) > 20, token.stderr
    finally:
        if browser:
            browser.close()
        tokend.terminate()
        tokend.wait(20)
