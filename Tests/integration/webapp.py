"""A web app on a loopback origin for the browser-bridge tests.

    /page            a page that loads tokend-page.js (the repository's web/tokend-page.js)
    /tokend-page.js  the page helper
    /echo            answers {"cookie": the request's Cookie header}
    /set?name=N&value=V[&delete=1]   sets (or deletes) a cookie, Path=/
"""
import http.server
import json
import os
import threading
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


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        headers = {"Cache-Control": "no-store"}
        if url.path == "/page":
            body, kind = PAGE, "text/html"
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


class WebApp:
    def __init__(self, host="127.0.0.1", port=0):
        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.origin = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
