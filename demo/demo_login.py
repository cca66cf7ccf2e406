"""make demo-login: the ways into a session, watched from the user's seat.

A real authorization server (django-oauth-toolkit on 127.0.0.1, OpenID
Connect on) and a tokend that knows only the server's issuer URL and a client
id per session. Then:

1. `tokenctl login --device` prints a code; "the user" (a headless Chromium
   driven by this script, standing in for your phone) signs in on the
   server's page, enters the code and approves. tokenctl reports who is
   logged in.
2. `tokenctl login --browser` prints a start URL (its own page, which sends the browser to the provider) and listens on
   127.0.0.1; the browser signs in, approves, and is sent back to tokenctl,
   whose page says "you can close this tab".
3. `tokenctl token` and `tokenctl status` on both sessions.
Everything started here is stopped at the end.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, ".build", "debug")
sys.path.insert(0, os.path.join(ROOT, "Tests", "integration"))
from browser import Browser  # noqa: E402

SCOPE = "openid profile email read"


def say(text=""):
    print(text, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokenctl(socket_path, *args):
    return [os.path.join(BIN, "tokenctl"), *args, "--socket", socket_path]


def echo_command(args):
    """Shows a tokenctl command as a user types it (without the demo's --socket)."""
    say("$ tokenctl " + " ".join(args[1:-2]))


def run_login(socket_path, flow, session, user_part):
    """Runs tokenctl login with its output shown as it comes; once it has
    printed the URL, `user_part(url)` does what the user does in a browser."""
    args = tokenctl(socket_path, "login", f"--{flow}", "--session", session)
    echo_command(args)
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = None
    while url is None:
        line = process.stdout.readline()
        if not line:
            break
        say("  " + line.rstrip())
        if flow == "device" and line.startswith("Or open "):
            complete = line.split()[-1]
        if flow == "device" and line.startswith("The code expires"):
            url = complete
        if flow == "browser" and line.strip().startswith("http"):
            url = line.strip()
    say(f"  [the user opens {url.split('?')[0]} in a browser, signs in as alice and approves]")
    page = user_part(url)
    if page:
        say(f"  [the browser tab now says: {' / '.join(page.splitlines())}]")
    for line in process.stdout:
        say("  " + line.rstrip())
    process.wait(60)
    return process.returncode


def main():
    directory = tempfile.mkdtemp(prefix="tkdemo", dir="/tmp")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}/o"
    processes = []
    browser = None
    try:
        say(f"Starting the authorization server on 127.0.0.1:{port} (django-oauth-toolkit, OpenID Connect)...")
        server = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "Tests", "authserver", "serve.py"), os.path.join(directory, "as"),
             str(port), "--oidc"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        processes.append(server)
        while not os.path.exists(os.path.join(directory, "as", "ready")):
            time.sleep(0.1)
        sock = os.path.join(directory, "sock")
        config = os.path.join(directory, "tokend.toml")
        with open(config, "w") as f:
            f.write(f"""[daemon]
socket = "{sock}"
state-directory = "{directory}/state"

# Headless host: device login. The test server does not advertise its device
# endpoint, so it is named; everything else comes from the issuer's discovery.
[sessions.default]
issuer = "{issuer}"
device-authorization-endpoint = "{issuer}/device-authorization/"
client-id = "tokend-device"
client-auth = "none"
scope = "{SCOPE}"

# Desktop: browser login with PKCE to a loopback redirect.
[sessions.desktop]
issuer = "{issuer}"
client-id = "tokend-browser"
client-auth = "none"
scope = "{SCOPE}"
""")
        say(f"tokend's configuration ({config}):")
        for line in open(config):
            say("  " + line.rstrip())
        tokend = subprocess.Popen([os.path.join(BIN, "tokend"), "--config", config],
                                  stdout=open(os.path.join(directory, "tokend.log"), "w"), stderr=subprocess.STDOUT)
        processes.append(tokend)
        while not os.path.exists(sock):
            time.sleep(0.05)
        browser = Browser()

        say("\n1. Device login (RFC 8628): for a host without a browser, e.g. over SSH.")
        code = run_login(sock, "device", "default", lambda url: browser.approve_device(url))
        say(f"  (exit code {code})")

        say("\n2. Browser login (authorization code + PKCE, RFC 8252 loopback redirect): for a desktop.")
        browser.driver.delete_all_cookies()
        code = run_login(sock, "browser", "desktop", lambda url: browser.authorize(url))
        say(f"  (exit code {code})")

        say("\n3. Both sessions hand out tokens; the refresh tokens stayed inside tokend.")
        for session in ("default", "desktop"):
            args = tokenctl(sock, "token", "--header", "--session", session)
            echo_command(args)
            out = subprocess.run(args, capture_output=True, text=True).stdout.strip()
            say("  " + out[:40] + "…")
        args = tokenctl(sock, "sessions")
        echo_command(args)
        say("  " + subprocess.run(args, capture_output=True, text=True).stdout.strip().replace("\n", "\n  "))
        say("\nThe third way in, a refresh token you already hold: tokenctl login < refresh-token.txt")
    finally:
        if browser:
            browser.close()
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM) if process is processes[0] else process.terminate()
                process.wait(10)
            except Exception:
                process.kill()
        if os.environ.get("KEEP_DEMO_DIR"):
            say(f"(kept {directory})")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
