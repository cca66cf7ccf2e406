"""Secret, key and password files other users may read (issue 41, finding 7):
the built tokend refuses to start on them (exit 78, EX_CONFIG) naming the file
and the chmod that fixes it, as it refuses state files others may write;
group-read passes only for tokend's own group; `tokenctl doctor` names the same."""
import os
import subprocess

from conftest import BIN, login
from test_doctor import Doctor

EX_CONFIG = 78
# A group tokend (root here) is not in: chown takes a number with no entry in /etc/group.
OTHER_GID = 4343


def run_tokend(config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "tokend"), "--config", config, *args],
                          capture_output=True, text=True, timeout=60)


def secret_of(daemon) -> str:
    return os.path.join(daemon.directory, "client-secret")


def test_a_client_secret_every_user_may_read_stops_tokend_with_the_fix(server, make_tokend):
    daemon = make_tokend(server)
    secret = secret_of(daemon)
    os.chmod(secret, 0o644)
    started = run_tokend(daemon.config)
    assert started.returncode == EX_CONFIG, started
    assert f"client-secret-file {secret} is readable by every user of this host (mode 0644)" in started.stderr
    assert f"fix: chmod 0600 {secret}" in started.stderr
    assert not os.path.exists(daemon.socket), "it never served"
    checked = run_tokend(daemon.config, "--check-config")
    assert checked.returncode == EX_CONFIG and f"fix: chmod 0600 {secret}" in checked.stderr, checked
    os.chmod(secret, 0o600)
    assert run_tokend(daemon.config, "--check-config").returncode == 0


def test_group_read_passes_only_for_tokends_own_group(server, make_tokend):
    daemon = make_tokend(server)
    secret = secret_of(daemon)
    os.chmod(secret, 0o640)
    os.chown(secret, -1, OTHER_GID)
    refused = run_tokend(daemon.config)
    assert refused.returncode == EX_CONFIG, refused
    assert f"is readable by the members of group {OTHER_GID}, not tokend's own group (mode 0640)" in refused.stderr
    assert f"chgrp root {secret} && chmod 0640 {secret}" in refused.stderr
    os.chown(secret, -1, os.getegid())
    daemon.start()
    login(daemon, server)
    assert daemon.ctl("token").returncode == 0


def test_a_client_key_others_may_read_stops_tokend(server, make_tokend, workdir):
    key = os.path.join(workdir, "client.key")
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
                   check=True, capture_output=True)
    os.chmod(key, 0o604)
    daemon = make_tokend(server, **{"client-auth": '"private-key-jwt"', "client-key-file": f'"{key}"'})
    # private-key-jwt needs no secret; the session keeps the one Tokend writes (0600) out of it.
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace(f'client-secret-file = "{secret_of(daemon)}"\n', ""))
    refused = run_tokend(daemon.config)
    assert refused.returncode == EX_CONFIG, refused
    assert f"client-key-file {key} is readable by every user of this host (mode 0604)" in refused.stderr
    assert "the client's private key" in refused.stderr


def test_a_store_password_others_may_read_fails_the_check(server, make_tokend, workdir):
    password = os.path.join(workdir, "db-password")
    with open(password, "w") as f:
        f.write("pw\n")
    os.chmod(password, 0o644)
    daemon = make_tokend(server, **{"shared-store": '"postgresql://tokend@127.0.0.1:5432/tokend"',
                                    "shared-store-password-file": f'"{password}"'})
    checked = run_tokend(daemon.config, "--check-config")
    assert checked.returncode == EX_CONFIG, checked
    assert f"shared-store-password-file {password} is readable by every user of this host" in checked.stderr


def test_doctor_names_a_secret_others_may_read(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    doctor = Doctor(daemon)
    assert doctor.outcome("credentials (default)") == "ok", doctor.output
    assert secret_of(daemon) in doctor.says("credentials (default)")
    # Made readable while tokend runs: the next start would fail, and the doctor says so now.
    os.chmod(secret_of(daemon), 0o644)
    doctor = Doctor(daemon)
    assert doctor.status == 1
    assert doctor.outcome("credentials (default)") == "FAIL"
    assert "may be read by every user of this host" in doctor.says("credentials (default)")
    assert f"fix: chmod 0600 {secret_of(daemon)}" in doctor.says("credentials (default)")
    assert doctor.outcome("configuration") == "FAIL", "tokend --check-config refuses it too"


def test_a_private_secret_another_user_owns_stops_tokend(server, make_tokend):
    """Mode 0600 is private to its owner, and here the owner is someone else,
    who can read the secret and change it (issue 49, finding 5): refused by
    owner, as the open file is (fstat), and named with the chown that fixes it.
    A symbolic link to it is judged by the file it reaches."""
    daemon = make_tokend(server)
    secret = secret_of(daemon)
    os.chown(secret, 4344, 4344)
    assert oct(os.stat(secret).st_mode & 0o777) == "0o600"
    started = run_tokend(daemon.config)
    assert started.returncode == EX_CONFIG, started
    assert f"client-secret-file {secret} belongs to uid 4344" in started.stderr, started.stderr
    assert f"fix: chown root {secret}" in started.stderr
    assert not os.path.exists(daemon.socket), "it never served"
    real = secret + ".real"
    os.rename(secret, real)
    os.symlink(real, secret)
    assert run_tokend(daemon.config, "--check-config").returncode == EX_CONFIG
    os.chown(real, 0, 0)
    assert run_tokend(daemon.config, "--check-config").returncode == 0
