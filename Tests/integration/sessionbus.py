"""A private D-Bus session bus for the agent's tests: dbus-daemon with a
configuration of its own (no service activation: a name nobody owns is
ServiceUnknown, as on a desktop without that service), python3-dbusmock's
notification daemon and the tests' portal (agent_portal.py) on it, and
busctl to ask them what they were called with."""
import json
import os
import signal
import subprocess

from conftest import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
# dbusmock is Debian's python3-dbusmock, for the system's Python (not the venv's).
SYSTEM_PYTHON = "/usr/bin/python3"
NOTIFICATIONS = ("org.freedesktop.Notifications", "/org/freedesktop/Notifications")
PORTAL = ("org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop")

CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
"""


class SessionBus:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "bus")
        self.address = f"unix:path={self.path}"
        config = os.path.join(directory, "bus.conf")
        with open(config, "w") as f:
            f.write(CONFIG.format(path=self.path))
        self.log = open(os.path.join(directory, "bus.log"), "a")
        self.processes = [subprocess.Popen(["dbus-daemon", "--nofork", f"--config-file={config}"],
                                           stdout=self.log, stderr=self.log, start_new_session=True)]
        wait_for(lambda: os.path.exists(self.path), 20, "dbus-daemon's socket")
        os.chmod(self.path, 0o666)  # the reader's agent runs as another uid

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        env.update(DBUS_SESSION_BUS_ADDRESS=self.address, **extra)
        return env

    def mock(self, template: str, name: str) -> None:
        """Runs a dbusmock template on the bus until `name` is owned."""
        self.processes.append(subprocess.Popen([SYSTEM_PYTHON, "-m", "dbusmock", "--template", template],
                                               env=self.env(), stdout=self.log, stderr=self.log,
                                               start_new_session=True))
        wait_for(lambda: self.owned(name), 30, f"{name} on the bus")

    def owned(self, name: str) -> bool:
        names = json.loads(self.busctl("list", "--json=short", "--acquired") or "[]")
        return any(entry.get("name") == name for entry in names)

    def busctl(self, *args: str) -> str:
        result = subprocess.run(["busctl", f"--address={self.address}", *args], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 0, f"busctl {args}: {result.stderr}"
        return result.stdout

    def calls(self, service: tuple[str, str], method: str) -> list[list]:
        """The arguments of each call of `method` the mock has had, oldest first."""
        reply = json.loads(self.busctl("call", "--json=short", service[0], service[1], "org.freedesktop.DBus.Mock",
                                       "GetMethodCalls", "s", method))
        return [[variant["data"] for variant in args] for _, args in reply["data"][0]]

    def emit(self, service: tuple[str, str], interface: str, member: str, signature: str, *values: str) -> None:
        """Makes the mock send a signal, as the real service would."""
        variants = [part for kind, value in zip(signature, values) for part in (kind, value)]
        self.busctl("call", service[0], service[1], "org.freedesktop.DBus.Mock", "EmitSignal", "sssav",
                    interface, member, signature, str(len(values)), *variants)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(10)
