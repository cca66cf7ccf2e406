"""docs/tokenctl-agent.png: the notification `tokenctl agent` posts when a
provider revokes a session's grant, shown by Debian's notification-daemon (a
real notification server, GTK) on Xvfb, against the built tokend and the test
authorization server, on a private session bus.
Usage: agent_screenshot.py OUTPUT.png (run from the repository, after `make build`)."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from conftest import AuthServer, BIN, Tokend, login, varlink_call, wait_for  # noqa: E402
from sessionbus import SessionBus  # noqa: E402

NOTIFICATION_DAEMON = "/usr/lib/notification-daemon/notification-daemon"
DISPLAY = ":87"
B = "io.tokend.Broker."


def revoke_everything(server: AuthServer) -> None:
    import sqlite3
    db = sqlite3.connect(os.path.join(server.directory, "db.sqlite3"))
    for (token,) in db.execute("select token from oauth2_provider_refreshtoken").fetchall():
        assert server.post("/o/revoke_token/", token=token, token_type_hint="refresh_token")[0] == 200


def main(output: str) -> None:
    directory = tempfile.mkdtemp(prefix="tkshot", dir="/tmp")
    server = AuthServer(os.path.join(directory, "as"))
    daemon = Tokend(directory, server)
    bus = SessionBus(directory)
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(["Xvfb", DISPLAY, "-br", "-screen", "0", "900x300x24", "-nolisten", "tcp"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: os.path.exists(f"/tmp/.X11-unix/X{DISPLAY[1:]}"), 20, "Xvfb")
        env = bus.env(DISPLAY=DISPLAY, GDK_BACKEND="x11", NO_AT_BRIDGE="1")
        processes.append(subprocess.Popen([NOTIFICATION_DAEMON], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        wait_for(lambda: bus.owned("org.freedesktop.Notifications"), 30, "notification-daemon on the bus")
        daemon.start()
        login(daemon, server)
        log_path = os.path.join(directory, "agent.log")
        with open(log_path, "w") as log:
            processes.append(subprocess.Popen(
                [os.path.join(BIN, "tokenctl"), "agent", "--socket", daemon.socket, "--config", daemon.config],
                env=env, stdout=log, stderr=log))
        said = lambda: open(log_path).read()  # noqa: E731
        wait_for(lambda: "watching" in said(), 30, "the agent")
        revoke_everything(server)
        generation = varlink_call(daemon.socket, B + "GetStatus", {"session": "default"})[1]["parameters"]["status"]["generation"]
        varlink_call(daemon.socket, B + "Refresh", {"staleGeneration": generation})
        wait_for(lambda: "needs a login: notification" in said(), 30, "the notification")
        # notification-daemon draws it a moment after answering Notify: shoot until the window is there.
        shot = os.path.join(directory, "screen.png")

        def drawn() -> bool:
            subprocess.run(["import", "-display", DISPLAY, "-window", "root", shot], check=True, timeout=30)
            colours = subprocess.run(["convert", shot, "-format", "%k", "info:"], capture_output=True, text=True,
                                     check=True).stdout.strip()
            return int(colours) > 50  # an empty root window is one colour
        wait_for(drawn, 30, "the notification drawn")
        subprocess.run(["convert", shot, "-trim", "-bordercolor", "#3c3c3c", "-border", "16", os.path.abspath(output)],
                       check=True)
        print(f"{output}: {said().strip().splitlines()[-1]}")
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(10)
        bus.stop()
        daemon.stop()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
