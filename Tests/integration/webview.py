"""A web view app on a virtual display (Xvfb), driven through its page: the
test app's /remote page runs the expressions the test queues (WebKitGTK has
no WebDriver here), and the app records the Cookie header of every request.

The apps: tokend-webview (the Swift library), and four that use
libtokend-webview-1 (`make webview-c` builds it): a C program on GTK 4, a
PyGObject program on GTK 4 (WebKitGTK 6.0) and on GTK 3 (WebKitGTK 4.1), and a
GJS program on GTK 4, the last three through the typelib. All take the same
command line: [--session NAME] [--socket PATH] URL."""
import os
import signal
import subprocess

from conftest import ROOT

WEBVIEW = os.path.join(ROOT, "webview", ".build", "debug", "tokend-webview")
# libtokend-webview-1's uninstalled tree (mk/webview-c.mk).
WEBVIEW_C = os.path.join(ROOT, "webview", ".build-c")
GI_APP = os.path.join(ROOT, "Tests", "webview-apps", "tokend_webview_gi.py")
GJS_APP = os.path.join(ROOT, "Tests", "webview-apps", "tokend_webview_gjs.js")
# Debian's python3 has PyGObject (the venv's python has not); gjs is Debian's too.
SYSTEM_PYTHON = "/usr/bin/python3"
GJS = "/usr/bin/gjs"

ALL_APPS = {
    "swift": [WEBVIEW],
    "c": [os.path.join(WEBVIEW_C, "bin", "tokend-webview-c")],
    "python-gtk4": [SYSTEM_PYTHON, GI_APP, "--gtk", "4"],
    "python-gtk3": [SYSTEM_PYTHON, GI_APP, "--gtk", "3"],
    "gjs": [GJS, "-m", GJS_APP],
}
# The apps the suite runs against: all of them (make webview-test), or those
# TOKEND_WEBVIEW_APPS names (make test runs tokend-webview's, to stay in its
# time; test_webview_gi.py covers the library apps there).
APPS = {name: command for name, command in ALL_APPS.items()
        if name in os.environ.get("TOKEND_WEBVIEW_APPS", ",".join(ALL_APPS)).split(",")}


def process_parents():
    """{pid: parent pid} of every process."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def program(pid):
    """The file name of the program `pid` runs ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode())
    except OSError:
        return ""


class Display:
    """An Xvfb server of our own, so that screenshots know its number. Xvfb picks the number
    itself (-displayfd: it takes the first whose lock file it can create, and says which once
    it accepts connections): a number chosen here could be taken by a test beside this one
    between the check and Xvfb's start."""

    def __init__(self):
        ready, told = os.pipe()
        self.process = subprocess.Popen(["Xvfb", "-displayfd", str(told), "-screen", "0", "1024x768x24",
                                         "-nolisten", "tcp"], pass_fds=(told,),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(told)
        with os.fdopen(ready) as f:
            number = f.readline().strip()
        assert number.isdigit(), f"Xvfb did not start (exit {self.process.poll()})"
        self.name = f":{number}"

    def screenshot(self, path):
        subprocess.run(["import", "-display", self.name, "-window", "root", path], check=True, timeout=30)

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


class WebView:
    """The web view app `app` (a key of APPS) showing `url`, bound to the tokend listening on `socket`.
    `loopback_names`: host names that resolve to 127.0.0.1 for the web view only
    (its own mount namespace, with an /etc/hosts of its own)."""

    def __init__(self, display, socket, url, log_path, home, session=None, loopback_names=(), app="swift"):
        program = next(part for part in ALL_APPS[app] if part.startswith(ROOT))  # not the interpreter
        assert os.path.exists(program), f"{program} is not built: make webview webview-c"
        self.log_path = log_path
        self.home = home  # HOME and XDG directories: everything the web view writes is under it
        self.log = open(log_path, "a")
        command = ALL_APPS[app] + ["--socket", socket, url] + (["--session", session] if session else [])
        if loopback_names:
            command = self.resolving(loopback_names, home) + command
        env = dict(os.environ, DISPLAY=display.name, NO_AT_BRIDGE="1", GTK_A11Y="none",
                   WEBKIT_DISABLE_COMPOSITING_MODE="1", LIBGL_ALWAYS_SOFTWARE="1", HOME=home,
                   XDG_CACHE_HOME=os.path.join(home, "cache"), XDG_DATA_HOME=os.path.join(home, "data"),
                   XDG_CONFIG_HOME=os.path.join(home, "config"), XDG_RUNTIME_DIR=os.path.join(home, "run"),
                   GI_TYPELIB_PATH=os.path.join(WEBVIEW_C, "lib", "girepository-1.0"),
                   LD_LIBRARY_PATH=os.path.join(WEBVIEW_C, "lib"))
        for name in ("cache", "data", "config", "run"):
            os.makedirs(os.path.join(home, name), mode=0o700, exist_ok=True)
        env.pop("TOKEND_SOCKET", None)
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=env, start_new_session=True)

    @staticmethod
    def resolving(names, home):
        """A command prefix that runs a program with `names` in its /etc/hosts as 127.0.0.1."""
        hosts = os.path.join(home, "hosts")
        os.makedirs(home, exist_ok=True)
        with open("/etc/hosts") as system, open(hosts, "w") as f:
            f.write(system.read() + "\n127.0.0.1 " + " ".join(names) + "\n")
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"', hosts]

    def descendants(self, name=None):
        """Pids of every process below this one (WebKit's web processes run under bwrap),
        those whose program is called `name` if given."""
        parents = process_parents()
        found, frontier = [], [self.process.pid]
        while frontier:
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
            found += frontier
        return [pid for pid in found if name is None or program(pid) == name]

    def children(self, name):
        """Pids of this process's own children whose program is called `name`."""
        parents = process_parents()
        return [pid for pid in self.descendants(name) if parents.get(pid) == self.process.pid]

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.process.poll() is None

    def close(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.log.close()
