"""What a reader copies works (issue 54): every configuration in README.md,
docs/*.md and the man pages passes `tokend --check-config`, and so does the
shipped etc/tokend/tokend.toml; every tokenctl command there is accepted by
tokenctl's argument parser; and README's quick start, followed literally with a
provider that has a public client, gives a running tokend that logs in: with
`tokenctl login --device` as README writes it (against Glewlwyd, whose
discovery names its device endpoint) and with its `--browser` alternative."""
import os
import re
import shlex
import subprocess
import tomllib
import urllib.parse

import pytest

from conftest import BIN, BROWSER, ROOT, AuthServer, wait_for
import snippets

CONFIGS = snippets.configs()
COMMANDS = snippets.commands()


def test_there_are_snippets_to_check():
    assert len(CONFIGS) >= 10 and len(COMMANDS) >= 15, (CONFIGS, COMMANDS)
    assert any(c.where.startswith("README.md") for c in CONFIGS)


def test_the_readme_stays_a_front_door():
    """README.md is at most 12,000 bytes (STYLE.md: the front door; reference lives in the man pages)."""
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    assert size <= 12_000, f"README.md is {size} bytes: move detail to docs/ or the man pages"


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


def readme_command(prefix):
    """The quick start's command that begins with `prefix`, as argv, exactly as README.md writes it."""
    found = [c for c in COMMANDS if c.where.startswith("README.md") and c.text.startswith(prefix)]
    assert found, f"README.md has no {prefix!r}"
    return shlex.split(found[0].text)


def run_quick_start_tokend(session, workdir):
    """tokend on README's session (already given the provider), its socket and
    state under workdir; returns the process and the environment in which a
    plain `tokenctl ...` (no --socket) reaches it."""
    socket_path, config = os.path.join(workdir, "sock"), os.path.join(workdir, "tokend.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nsocket = "{socket_path}"\nstate-directory = "{workdir}/state"\n\n' + session)
    checked = check_config(config)
    assert checked.returncode == 0, checked.stderr
    with open(os.path.join(workdir, "tokend.log"), "w") as log:
        tokend = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", config], stdout=log, stderr=log)
    wait_for(lambda: os.path.exists(socket_path) or tokend.poll() is not None, 20, "tokend's socket")
    assert tokend.poll() is None, open(os.path.join(workdir, "tokend.log")).read()
    return tokend, dict(os.environ, TOKEND_SOCKET=socket_path)


def test_the_quick_start_device_login_followed_literally(workdir):
    """README's session and its login command as written (`tokenctl login
    --device`), against a provider whose discovery names a device endpoint and
    that has a public client: Glewlwyd (the test authorization server does the
    device grant but does not advertise it, so README's issuer-only session
    could not find it there). Only the issuer and the client id are put in. The
    user approves the code tokenctl printed; login exits 0 and README's
    `tokenctl token` prints the token."""
    from provider2 import PUBLIC_CLIENT_ID, Glewlwyd
    provider = Glewlwyd(os.path.join(workdir, "g2"))
    tokend = None
    try:
        session = quick_start().text.replace("https://id.example.com", provider.issuer)
        session = session.replace('"my-app"', f'"{PUBLIC_CLIENT_ID}"')
        assert session.count(provider.issuer) == 1 and PUBLIC_CLIENT_ID in session
        tokend, env = run_quick_start_tokend(session, workdir)
        login = readme_command("tokenctl login")
        assert login == ["tokenctl", "login", "--device"], login
        process = subprocess.Popen([os.path.join(BIN, "tokenctl"), *login[1:]], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
        printed = []
        while not printed or not printed[-1].startswith("Or open "):
            line = process.stdout.readline()
            assert line, f"tokenctl ended early: {''.join(printed)} {process.stderr.read()}"
            printed.append(line)
        code = urllib.parse.parse_qs(urllib.parse.urlparse(printed[-1].split()[-1]).query)["code"][0]
        assert code in "".join(printed[:-1]), printed  # the code to enter is shown too
        provider.approve_device(code)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, (out, err)
        token = subprocess.run([os.path.join(BIN, "tokenctl"), *readme_command("tokenctl token")[1:]],
                               capture_output=True, text=True, timeout=30, env=env)
        assert token.returncode == 0 and len(token.stdout.strip()) > 20, token.stderr
    finally:
        if tokend:
            tokend.terminate()
            tokend.wait(20)
        provider.stop()


@pytest.fixture
def public_provider(workdir):
    instance = AuthServer(os.path.join(workdir, "as"), extra=["--oidc"])
    yield instance
    instance.stop()


@BROWSER
def test_the_quick_start_browser_login(public_provider, workdir):
    """README's alternative, `--browser on a desktop`: the same session with
    the test provider's issuer and its public browser client put in; tokend
    runs on it, `tokenctl login --browser` logs in through Chromium, and
    `tokenctl token` prints a token."""
    from browser import Browser
    session = quick_start().text.replace("https://id.example.com", public_provider.issuer)
    session = session.replace('"my-app"', '"tokend-browser"')
    assert session.count(public_provider.issuer) == 1 and '"tokend-browser"' in session
    assert "# or --browser on a desktop" in open(os.path.join(ROOT, "README.md")).read()
    tokend, env = run_quick_start_tokend(session, workdir)
    browser = None
    try:
        process = subprocess.Popen([os.path.join(BIN, "tokenctl"), "login", "--browser"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
        start = ""
        while not start.startswith("http"):
            line = process.stdout.readline()
            assert line, f"tokenctl ended early: {process.stderr.read()}"
            start = line.strip()
        browser = Browser()
        assert "Logged in" in browser.authorize(start)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        token = subprocess.run([os.path.join(BIN, "tokenctl"), "token"], capture_output=True, text=True,
                               timeout=30, env=env)
        assert token.returncode == 0 and len(token.stdout.strip()) > 20, token.stderr
    finally:
        if browser:
            browser.close()
        tokend.terminate()
        tokend.wait(20)
