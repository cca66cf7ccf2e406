"""A test API on loopback for programs that get their token from tokend:
it checks bearer tokens, sets and deletes cookies, streams large bodies.

    GET  /data                  200 {"token": ...} for a bearer token it has not been told to refuse, else 401
    GET  /set-cookie?name=&value=   sets a cookie (Path=/, an hour)
    GET  /delete-cookie?name=   deletes it (Max-Age=0)
    GET  /big?bytes=N           N bytes of body, streamed
    POST /upload[?rate=MB]      reads the body (PUT too; at most MB megabytes a second), answers {"bytes": n}

Made with `introspection` (an authorization server's RFC 7662 endpoint, asked
with `client`'s credentials), it is also any number of resource servers: a
request to /NAME/... (GET or POST) is for the resource
http://127.0.0.1:PORT/NAME/ (`resource(NAME)`), and is answered 200
{"resource", "aud", "scope", "token"} only when the bearer token is active and
its audience (introspection's `aud`, the token's RFC 8707 resources) includes
that resource exactly; otherwise 401 invalid_token (WWW-Authenticate names
why). `?scope=S` also requires each of S's scopes (403 insufficient_scope).
Each decision is appended to `checks` as (resource, status).
"""
import http.server
import json
import re
import socket
import threading
import time
import urllib.parse

import requests

RESOURCE_PATH = re.compile(r"^/([^/]+)/")


class TestAPI:
    __test__ = False  # not a pytest test class

    def __init__(self, introspection: str | None = None,
                 client: tuple[str, str] = ("tokend-test", "tokend-test-secret")):
        self.refused = set()
        self.gate = None
        self.seen = []
        self.checks: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.introspection = introspection
        self.client = client
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # Headers and body go out in separate writes: without this, Nagle
                # and the client's delayed ACK add 40 ms to every answer.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):
                pass

            def answer(self, status, document, headers=()):
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                authorization = self.headers.get("Authorization", "")
                token = authorization[7:] if authorization.startswith("Bearer ") else None
                with api.lock:
                    api.seen.append((url.path, token, self.headers.get("Cookie")))
                    refused = token is None or token in api.refused
                named = RESOURCE_PATH.match(url.path) if api.introspection else None
                if named:
                    return self.answer(*api.check(named.group(1), None if refused else token, query.get("scope")))
                if url.path == "/data":
                    if refused:
                        gate = api.gate
                        if gate is not None:  # every caller sends the refused token before any is answered
                            try:
                                gate.wait(timeout=30)
                            except threading.BrokenBarrierError:
                                pass
                        return self.answer(401, {"error": "invalid_token"}, [("WWW-Authenticate", "Bearer")])
                    return self.answer(200, {"token": token, "cookie": self.headers.get("Cookie")})
                if url.path == "/set-cookie":
                    cookie = f"{query['name']}={query.get('value', '')}; Path=/; Max-Age=3600"
                    return self.answer(200, {}, [("Set-Cookie", cookie)])
                if url.path == "/delete-cookie":
                    return self.answer(200, {}, [("Set-Cookie", f"{query['name']}=; Path=/; Max-Age=0")])
                if url.path == "/big":
                    size = int(query["bytes"])
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(size))
                    self.end_headers()
                    chunk = b"x" * (1 << 20)
                    sent = 0
                    while sent < size:
                        piece = chunk[:min(len(chunk), size - sent)]
                        self.wfile.write(piece)
                        sent += len(piece)
                    return None
                self.answer(404, {})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                url = urllib.parse.urlparse(self.path)
                rate = float(dict(urllib.parse.parse_qsl(url.query)).get("rate", 0))
                started = time.monotonic()
                received = 0
                while received < length:
                    piece = self.rfile.read(min(1 << 20, length - received))
                    if not piece:
                        break
                    received += len(piece)
                    if rate:  # a slow reader: the sender must wait for it
                        time.sleep(max(0.0, started + received / (rate * 1e6) - time.monotonic()))
                if api.introspection and RESOURCE_PATH.match(url.path):
                    return self.do_GET()
                self.answer(200, {"bytes": received})

            do_PUT = do_POST

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def resource(self, name: str) -> str:
        """The resource indicator of the resource server NAME."""
        return f"{self.url}/{name}/"

    def check(self, name: str, token: str | None, scope: str | None) -> tuple[int, dict, list[tuple[str, str]]]:
        """The resource server NAME's answer to a bearer token: status, body, headers."""
        resource = self.resource(name)
        status, document, why = 200, {}, ""
        if token is None:
            status, why = 401, "no usable bearer token"
        else:
            answer = requests.post(self.introspection, data={"token": token}, auth=self.client, timeout=30).json()
            audience = answer.get("aud", [])
            audience = [audience] if isinstance(audience, str) else audience
            granted = (answer.get("scope") or "").split()
            document = {"resource": resource, "aud": audience, "scope": answer.get("scope"), "token": token}
            if not answer.get("active"):
                status, why = 401, "token not active"
            elif resource not in audience:
                status, why = 401, "token audience does not include " + resource
            elif scope and not set(scope.split()) <= set(granted):
                status, why = 403, "token scope lacks " + scope
        with self.lock:
            self.checks.append((resource, status))
        if status == 200:
            return status, document, []
        error = "insufficient_scope" if status == 403 else "invalid_token"
        return status, {**document, "error": error, "why": why}, [
            ("WWW-Authenticate", f'Bearer error="{error}", error_description="{why}"')]

    def refuse(self, token, callers=None):
        """From now on, this token is answered 401 (as if the provider had revoked it). With
        `callers`, the first 401s wait until that many requests with a refused token have
        arrived: every caller meets the 401, none gets the new token first."""
        with self.lock:
            self.refused.add(token)
            self.gate = threading.Barrier(callers) if callers else None

    def stop(self):
        self.server.shutdown()
