"""A web app on a loopback origin for the browser-bridge tests.

    /page            a page that loads tokend-page.js (the repository's web/tokend-page.js)
    /tokend-page.js  the page helper
    /echo            answers {"cookie": the request's Cookie header}
    /set?name=N&value=V[&delete=1]   sets (or deletes) a cookie, Path=/
    /remote          /page, driven from the test: it records document.cookie before
                     any other script, then runs the expressions `run` queues
                     (for web views, which have no WebDriver here)
"""
import http.server
import itertools
import json
import os
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = b"""<!doctype html><meta charset="utf-8"><title>web app</title>
<script src="/tokend-page.js"></script>
<body><h1>web app</h1><script>
window.bridgeReady = new Promise((resolve) => {
  window.addEventListener("message", (e) => { if (e.data && e.data.tokend === "ready") resolve(true); });
});
window.events = [];
for (const name of ["loggedIn", "refreshed", "loggedOut"]) tokend.on(name, (e) => events.push([name, e.generation]));
</script>"""


# The page's first script records what the page saw before anything else ran;
# the last one fetches expressions from /command and posts their results.
REMOTE = (b"""<!doctype html><script>window.initialCookie = document.cookie; window.seen = [];
window.addEventListener("message", (e) => window.seen.push(JSON.stringify(e.data)));</script>"""
          + PAGE.replace(b"<!doctype html>", b"", 1) + b"""<script>
(async () => {
  const page = Math.random().toString(36).slice(2);
  await fetch(`/ready?page=${page}`, { cache: "no-store" }).catch(() => {});
  for (;;) {
    let command;
    try { command = await (await fetch(`/command?page=${page}`, { cache: "no-store" })).json(); }
    catch (e) { await new Promise((r) => setTimeout(r, 200)); continue; }
    if (command.id === undefined) continue;
    let result;
    try { result = { value: await (0, eval)(command.js) }; }
    catch (e) { result = { value: { error: e.name || String(e) } }; }
    fetch("/result", { method: "POST", body: JSON.stringify({ id: command.id, ...result }) });
  }
})();
if (location.search.includes("show")) tokend.getToken().then(async (token) => {
  const sent = (await (await fetch("/echo")).json()).cookie;
  document.body.style.cssText = "font: 16px system-ui, sans-serif; margin: 0; background: #f4f6f8; color: #1d2630";
  document.body.innerHTML = `<header style="background:#24425f;color:#fff;padding:14px 24px;font-size:20px">
      Example web app <span style="float:right;background:#2e9e5b;border-radius:12px;padding:2px 12px;font-size:15px">signed in</span></header>
    <main style="margin:32px 24px;max-width:720px;background:#fff;border-radius:8px;padding:8px 24px;box-shadow:0 1px 3px #0003">
    <h1 style="font-size:24px">Signed in through tokend</h1></main>`;
  const line = (label, text) => document.querySelector("main").insertAdjacentHTML("beforeend",
    `<p><b>${label}</b><br><code>${text}</code></p>`);
  line("Access token (from tokend, generation " + token.generation + ")", token.accessToken.slice(0, 8) + "... expires " + new Date(token.expiresAt * 1000).toISOString());
  line("Cookies this page's scripts can see", document.cookie || "(none)");
  line("Cookies its requests carry, from tokend (sid is HttpOnly)", sent || "(none)");
  line("Refresh token", "stays in tokend: never in this page, its storage or its processes");
});
</script>""")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/result":
            self.send_error(404)
            return
        result = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.app.results[result["id"]] = result.get("value")
        self.server.app.answered.set()
        self.send_response(204)
        self.end_headers()

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        headers = {"Cache-Control": "no-store"}
        app = self.server.app
        if url.path != "/command":
            app.requests.append((url.path, self.headers.get("Cookie", "")))
        if url.path == "/page":
            body, kind = PAGE, "text/html"
        elif url.path == "/remote":
            body, kind = REMOTE, "text/html"
        elif url.path == "/ready":  # a /remote page runs: commands go to it, not to the one before
            with app.turn:
                app.page = query.get("page")
                app.turn.notify_all()
            body, kind = b"{}", "application/json"
        elif url.path == "/command":
            body, kind = json.dumps(app.next_command(query.get("page"))).encode(), "application/json"
        elif url.path == "/tokend-page.js":
            body, kind = open(os.path.join(ROOT, "web", "tokend-page.js"), "rb").read(), "text/javascript"
        elif url.path == "/echo":
            body, kind = json.dumps({"cookie": self.headers.get("Cookie", "")}).encode(), "application/json"
        elif url.path == "/set":
            age = "; Max-Age=0" if query.get("delete") else "; Max-Age=3600"
            headers["Set-Cookie"] = f"{query['name']}={query.get('value', '')}; Path=/{age}"
            body, kind = b"{}", "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Commands:
    """Expressions waiting for the current /remote page."""

    def __init__(self, app):
        self.app = app
        self.pending = []

    def put(self, command):
        with self.app.turn:
            self.pending.append(command)
            self.app.turn.notify_all()


class WebApp:
    def __init__(self, host="127.0.0.1", port=0):
        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.server.app = self
        self.server.handle_error = lambda *_: None  # pages that navigate away drop their polls
        self.origin = f"http://{host}:{self.server.server_address[1]}"
        self.requests = []  # (path, Cookie header) of every request but /command
        self.commands = Commands(self)
        self.page = None  # the /remote page that runs commands: the newest one
        self.turn = threading.Condition()
        self.results = {}
        self.answered = threading.Event()
        self.ids = itertools.count(1)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_command(self, page):
        """The next command for `page`, if it is the current page (waits up to a second)."""
        with self.turn:
            ready = lambda: self.commands.pending and page == self.page
            self.turn.wait_for(ready, timeout=1)
            return self.commands.pending.pop(0) if ready() else {}

    def run(self, expression, timeout=30):
        """Evaluates a (promise-returning) expression in the /remote page open on
        this app; errors come back as {'error': name}."""
        command_id = next(self.ids)
        self.commands.put({"id": command_id, "js": expression})
        deadline = time.monotonic() + timeout
        while command_id not in self.results:
            if time.monotonic() > deadline:
                raise AssertionError(f"no page on {self.origin} ran {expression!r}")
            self.answered.wait(0.1)
            self.answered.clear()
        return self.results.pop(command_id)

    def stop(self):
        self.server.shutdown()
