"""Headless Firefox ESR driven over WebDriver BiDi, which Firefox speaks
itself (no geckodriver): the extension installed as a temporary add-on, pages
opened and scripts run in them, cookies read from the browser."""
import json
import os
import re
import subprocess
import threading

from websockets.sync.client import connect

PREFS = """
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("app.update.disabledForTesting", true);
user_pref("extensions.originControls.grantByDefault", true);
user_pref("network.proxy.type", 0);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
"""


class Firefox:
    def __init__(self, extension=None, env=None, profile=None):
        os.makedirs(profile, exist_ok=True)
        with open(os.path.join(profile, "user.js"), "w") as f:
            f.write(PREFS)
        self.process = subprocess.Popen(
            ["firefox-esr", "--headless", "--no-remote", "--profile", profile, "--remote-debugging-port=0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        for line in self.process.stderr:
            found = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "Firefox did not start its WebDriver BiDi server"
        threading.Thread(target=lambda: [None for _ in self.process.stderr], daemon=True).start()
        self.connection = connect(url.rstrip("/") + "/session", max_size=64 << 20, open_timeout=30)
        self.socket = self.connection.__enter__()
        self.next_id = 0
        self.command("session.new", {"capabilities": {}})
        self.extension_id = None
        if extension:
            self.extension_id = self.command(
                "webExtension.install", {"extensionData": {"type": "path", "path": extension}})["extension"]
        self.context = self.command("browsingContext.getTree", {})["contexts"][0]["context"]

    def command(self, method, params, timeout=60):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=timeout))
            if message.get("id") != self.next_id:
                continue  # an event
            if message.get("type") == "error":
                raise RuntimeError(f"{method}: {message.get('error')}: {message.get('message')}")
            return message["result"]

    def get(self, url):
        self.command("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    def run(self, expression, timeout=60):
        """Evaluates a promise-returning expression in the page; errors come back as {'error': name}."""
        wrapped = (f"Promise.resolve().then(() => {expression})"
                   ".then(v => v, e => ({error: e.name || String(e)}))")
        result = self.command("script.evaluate", {
            "expression": wrapped, "target": {"context": self.context}, "awaitPromise": True,
            "serializationOptions": {"maxObjectDepth": 10}}, timeout=timeout)
        if result.get("type") == "exception":
            raise RuntimeError(result["exceptionDetails"].get("text"))
        return value(result["result"])

    def cookies(self):
        """Every cookie in the browser: [{name, domain, value}]."""
        found = self.command("storage.getCookies", {})["cookies"]
        return [{"name": c["name"], "domain": c["domain"], "value": c["value"].get("value")} for c in found]

    def close(self):
        try:
            self.command("browser.close", {}, timeout=10)
        except Exception:
            pass
        try:
            self.connection.__exit__(None, None, None)
        finally:
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def value(remote):
    """A BiDi RemoteValue as a Python value."""
    kind = remote.get("type")
    if kind in ("undefined", "null"):
        return None
    if kind in ("string", "boolean"):
        return remote["value"]
    if kind == "number":
        number = remote["value"]
        if isinstance(number, str):  # NaN, Infinity, -0
            return float(number.replace("Infinity", "inf")) if number != "NaN" else float("nan")
        return number
    if kind == "bigint":
        return int(remote["value"])
    if kind == "array":
        return [value(v) for v in remote.get("value", [])]
    if kind == "object":
        return {(k if isinstance(k, str) else value(k)): value(v) for k, v in remote.get("value", [])}
    return remote.get("value")
