"""State sealed at rest with AES-256-GCM: key file or systemd credential,
migration of plain state, and refusal (destroying nothing) without the key."""
import hashlib
import json
import os
import subprocess

from conftest import BIN, login


def generate_key(path):
    key = subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True, text=True,
                         check=True).stdout
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, key.encode())
    os.close(fd)
    return key.strip()


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_plain_state_migrates_and_a_wrong_key_refuses_to_start(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    refresh_token = login(daemon, server)
    state = os.path.join(daemon.state, "default.session")
    assert '"encryption":"none"' in open(state).read()
    with open(state) as f:
        record = json.load(f)["record"]
    # Long values only: a short text like "sid" may stand in base64 ciphertext by chance (~1 run in 50).
    secrets = [value for value in record.values() if isinstance(value, str) and len(value) >= 16]
    assert secrets, record.keys()
    daemon.stop()

    key = os.path.join(workdir, "state.key")
    generate_key(key)
    with open(daemon.config) as f:
        config = f.read()
    with open(daemon.config, "w") as f:
        f.write(config.replace("[daemon]\n", f'[daemon]\nstate-key-file = "{key}"\n'))
    daemon.start()
    sealed = open(state).read()
    assert '"encryption":"aes-256-gcm"' in sealed
    assert refresh_token not in sealed and '"refreshToken"' not in sealed
    assert [value for value in secrets if value in sealed] == [], "the state's tokens are sealed"
    assert "state file sealed with the state key" in daemon.logs()
    assert daemon.ctl("token").returncode == 0, "the session survived the migration"
    daemon.stop()

    before = digest(state)
    generate_key(key)  # another key
    result = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True, text=True,
                            timeout=20)
    assert result.returncode == 78
    assert "cannot be decrypted with the state key" in result.stderr and "left as it is" in result.stderr
    os.remove(key)
    result = subprocess.run([os.path.join(BIN, "tokend"), "--config", daemon.config], capture_output=True, text=True,
                            timeout=20)
    assert result.returncode == 78 and "cannot read the state key" in result.stderr
    left = sorted(f for f in os.listdir(daemon.state) if f != "shares.json")  # the earlier run's (empty) share list
    assert digest(state) == before and left == ["default.session", "tokend.lock"], f"nothing destroyed: {left}"


def test_key_from_systemd_credential(server, make_tokend, workdir):
    credentials = os.path.join(workdir, "creds")
    os.mkdir(credentials, 0o700)
    generate_key(os.path.join(credentials, "tokend.state-key"))
    daemon = make_tokend(server).start(env=dict(os.environ, CREDENTIALS_DIRECTORY=credentials))
    login(daemon, server)
    assert '"encryption":"aes-256-gcm"' in open(os.path.join(daemon.state, "default.session")).read()
    assert "credential tokend.state-key" in daemon.logs()
