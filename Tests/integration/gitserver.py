"""A git smart-HTTP server on 127.0.0.1 for the credential-helper tests.

git's own `git http-backend` (CGI) serves the repositories under ROOT; every
request must carry Basic credentials whose password is an access token the
test authorization server's introspection endpoint calls active. Anything
else is answered 401, so git asks its credential helper. Each request's
outcome is counted in `log`. `hold_refusals(n)` makes the next n refused
requests wait for each other, so n clients get their 401 at the same moment.
"""
import base64
import http.server
import json
import os
import subprocess
import threading
import urllib.parse
import urllib.request


class GitServer:
    def __init__(self, root, introspection_url, client_id, client_secret):
        self.root = root
        self.log = []
        self.barrier = None
        lock = threading.Lock()
        server = self

        def active(token):
            request = urllib.request.Request(introspection_url, data=urllib.parse.urlencode({"token": token}).encode())
            credentials = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
            request.add_header("Authorization", "Basic " + credentials)
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read()).get("active") is True

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                self.serve()

            def do_POST(self):
                self.serve()

            def serve(self):
                header = self.headers.get("Authorization", "")
                token = None
                if header.startswith("Basic "):
                    token = base64.b64decode(header[6:]).decode().split(":", 1)[-1]
                ok = token is not None and active(token)
                with lock:
                    server.log.append("ok" if ok else ("refused" if token else "challenge"))
                if not ok and token is not None and server.barrier is not None:
                    try:
                        server.barrier.wait(timeout=30)
                    except threading.BrokenBarrierError:
                        pass
                if not ok:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.cgi()

            def cgi(self):
                url = urllib.parse.urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = dict(os.environ, GIT_PROJECT_ROOT=server.root, GIT_HTTP_EXPORT_ALL="1",
                           PATH_INFO=url.path, QUERY_STRING=url.query, REQUEST_METHOD=self.command,
                           CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                           REMOTE_USER="tokend", REMOTE_ADDR="127.0.0.1",
                           HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""),
                           GIT_PROTOCOL=self.headers.get("Git-Protocol", ""))
                result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
                head, _, payload = result.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.split(b"\r\n"):
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold_refusals(self, n):
        self.barrier = threading.Barrier(n)

    def url(self, repository):
        return f"http://{self.host}/{repository}"

    def stop(self):
        self.server.shutdown()
