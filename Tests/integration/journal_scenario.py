"""Run by test_systemd inside a private journal socket: starts tokend (which
logs to the journal), logs in, refreshes, logs out, stops it. Writes the
access tokens it saw to TOKENS so the test can check none was logged.

    python journal_scenario.py TOKEND TOKENCTL CONFIG SOCKET REFRESH_TOKEN_FILE TOKENS
"""
import os
import signal
import subprocess
import sys

from conftest import wait_for

tokend, tokenctl, config, sock, token_file, tokens_out = sys.argv[1:7]
process = subprocess.Popen([tokend, "--config", config])
wait_for(lambda: os.path.exists(sock), 20, "tokend's socket")


def ctl(*args, stdin=None):
    return subprocess.run([tokenctl, args[0], "--socket", sock, *args[1:]], stdin=stdin,
                          capture_output=True, text=True, timeout=30)


with open(token_file) as f:
    ctl("login", stdin=f)
seen = [ctl("token").stdout.strip()]
ctl("refresh")
seen.append(ctl("token").stdout.strip())
ctl("logout")
process.send_signal(signal.SIGTERM)
code = process.wait(30)
with open(tokens_out, "w") as f:
    f.write("\n".join(seen))
sys.exit(code)
