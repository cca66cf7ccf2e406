"""`tokenctl access` (issue 54): what this user, or for root and tokend's admins another
user, may do with each session, from the policy tokend holds (GetAccess); doctor shows
the caller's own line; a refused call's advice names the tables and keys that admit.
Other users are real ones (nobody, daemon) run through setpriv, as test_shares does."""
import json
import os
import subprocess

from conftest import BIN, open_to_other_users

TOKENCTL = os.path.join(BIN, "tokenctl")
# nobody reads; daemon (uid 1, group 1) also writes cookies; root administers (the default).
ACCESS = 'read-users = ["nobody"]\ncookies-write-users = ["daemon"]'


def as_user(uid, gid, *args):
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", TOKENCTL, *args],
                          capture_output=True, text=True, timeout=30)


def lines(result):
    assert result.returncode == 0, (result.returncode, result.stderr)
    return {o["session"]: o for o in map(json.loads, result.stdout.splitlines())}


def test_a_user_sees_what_it_may_do(server, make_tokend, workdir):
    daemon = open_to_other_users(make_tokend, server, workdir, ACCESS)
    words = as_user(65534, 65534, "access", "--socket", daemon.socket)
    assert words.returncode == 0 and words.stdout == "default: read, share\n", (words.stdout, words.stderr)
    mine = lines(as_user(65534, 65534, "access", "--socket", daemon.socket, "--json"))["default"]
    assert mine == {"session": "default", "read": True, "share": True, "login": False, "cookiesWrite": False,
                    "pages": [], "deniedResources": []}
    # What it claims is what tokend does: the reader gets a token and may not log out.
    assert as_user(65534, 65534, "token", "--socket", daemon.socket).returncode == 0
    assert as_user(65534, 65534, "logout", "--socket", daemon.socket).returncode == 6


def test_only_root_and_admins_may_ask_about_another_user(server, make_tokend, workdir):
    daemon = open_to_other_users(make_tokend, server, workdir, ACCESS)
    refused = as_user(65534, 65534, "access", "--socket", daemon.socket, "--user", "daemon")
    assert refused.returncode == 6, (refused.returncode, refused.stderr)
    own = as_user(65534, 65534, "access", "--socket", daemon.socket, "--user", "nobody")
    assert own.returncode == 0 and "default: read, share" in own.stdout, own.stderr
    writer = lines(daemon.ctl("access", "--user", "daemon", "--json"))["default"]
    assert writer["read"] and writer["cookiesWrite"] and not writer["login"], writer
    reader = lines(daemon.ctl("access", "--user", "65534", "--json"))["default"]
    assert reader["read"] and not reader["cookiesWrite"] and not reader["login"], reader
    root = daemon.ctl("access", "--user", "root")
    assert root.stdout == "default: read, share, log in, write cookies\n", root.stdout
    unknown = daemon.ctl("access", "--user", "no-such-user-here")
    assert unknown.returncode != 0 and "user" in unknown.stderr, unknown.stderr


def test_doctor_shows_the_callers_own_line(server, make_tokend, workdir):
    daemon = open_to_other_users(make_tokend, server, workdir, ACCESS)
    os.chmod(daemon.config, 0o644)
    mine = as_user(65534, 65534, "doctor", "--socket", daemon.socket, "--config", daemon.config)
    assert "ok    access (nobody): default: read, share\n" in mine.stdout, mine.stdout
    root = daemon.ctl("doctor", "--config", daemon.config)
    assert "ok    access (root): default: read, share, log in, write cookies\n" in root.stdout, root.stdout


def test_permission_denied_names_the_tables_and_keys_that_admit(server, make_tokend, workdir):
    """A reader asks for what only admins may (logout): the advice names where and how to admit it."""
    daemon = open_to_other_users(make_tokend, server, workdir, ACCESS)
    named = as_user(65534, 65534, "logout", "--socket", daemon.socket, "--session", "default")
    assert named.returncode == 6, named.stderr
    advice = " ".join(named.stderr.split())
    for words in ("[sessions.default.access] (else [access])", "read-users", "read-groups", "admin-users",
                  "admin-groups", "reloads tokend", "`tokenctl access`"):
        assert words in advice, (words, advice)
    unnamed = as_user(65534, 65534, "logout", "--socket", daemon.socket)
    assert unnamed.returncode == 6 and "[access]" in unnamed.stderr and "admin-users" in unnamed.stderr


def test_a_user_admitted_to_nothing_is_told_so_and_what_would_admit_it(server, make_tokend, workdir):
    """bin (uid 2) is in no [access] key: tokend refuses it everything, `access` included, so that is no advice."""
    daemon = open_to_other_users(make_tokend, server, workdir, ACCESS)
    for args in (("token",), ("access",)):
        refused = as_user(2, 2, *args, "--socket", daemon.socket)
        assert refused.returncode == 6, (args, refused.returncode, refused.stderr)
        advice = " ".join(refused.stderr.split())
        assert "(bin) may use no session" in advice and "read-users" in advice and "[access]" in advice, advice
        assert "`tokenctl access`" not in advice, advice


def test_access_for_a_user_that_does_not_exist_says_so(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    unknown = daemon.ctl("access", "--user", "no-such-user-here")
    assert unknown.returncode == 64 and "no-such-user-here: there is no such user" in unknown.stderr, unknown.stderr
    assert "rejected the parameter" not in unknown.stderr
