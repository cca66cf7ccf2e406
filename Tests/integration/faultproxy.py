"""A token endpoint that misbehaves on demand, in front of the real
authorization server. In mode "pass" it forwards requests; every other mode
answers by itself without forwarding, so no refresh token is consumed while
tokend sees a fault. Each request is recorded with its time and mode."""
import http.server
import json
import socket
import threading
import time
import urllib.error
import urllib.request

FAULTS = {
    "500": "HTTP 500",
    "502": "HTTP 502",
    "503": "HTTP 503",
    "429": "HTTP 429 with Retry-After: 3",
    "reset": "connection reset before any answer",
    "hang": "accepts, reads the request, never answers",
    "slow": "answers 200 then sends the body one byte per second",
    "truncated": "Content-Length 400, 20 bytes, close",
    "html": "200 with a non-JSON body",
    "error-field": "200 with an error member (temporarily_unavailable)",
    "oversize": "200 with a 300 KiB body (over the 256 KiB cap)",
}

# Not faults to survive but attacks to refuse (test_security.py).
ATTACKS = {
    "redirect": "307 to another origin, which records what it is sent",
    "echo": "400 whose error_description repeats the request it received",
}


class FaultProxy:
    def __init__(self, upstream):
        self.upstream = upstream
        self.mode = "pass"
        self.requests = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                mode = proxy.mode
                with proxy.lock:
                    proxy.requests.append((time.time(), mode))
                getattr(self, "fault_" + mode.replace("-", "_"), self.fault_status)(body, mode)

            def send(self, status, payload, headers=()):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def fault_pass(self, body, _):
                request = urllib.request.Request(proxy.upstream + self.path, data=body, method="POST")
                for name in ("Authorization", "Content-Type", "Cookie"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        status, payload = response.status, response.read()
                        headers = [(k, v) for k, v in response.headers.items() if k.lower() == "set-cookie"]
                except urllib.error.HTTPError as error:
                    status, payload, headers = error.code, error.read(), []
                if proxy.rewrite and status == 200:
                    payload = json.dumps(proxy.rewrite(json.loads(payload))).encode()
                self.send(status, payload, [("Content-Type", "application/json")] + headers + proxy.extra_headers)

            def fault_status(self, _, mode):
                headers = [("Retry-After", "3")] if mode == "429" else []
                self.send(int(mode), b"<html>unavailable</html>", headers + [("Content-Type", "text/html")])

            def fault_reset(self, *_):
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.connection.close()
                self.close_connection = True

            def fault_hang(self, *_):
                time.sleep(30)  # the fault: no answer for longer than any upstream-timeout
                self.close_connection = True

            def fault_slow(self, *_):
                payload = b'{"access_token":"slow","token_type":"Bearer","expires_in":3600}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    for byte in payload:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(1)  # the fault: one byte a second
                except OSError:
                    pass
                self.close_connection = True

            def fault_truncated(self, *_):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "400")
                self.end_headers()
                self.wfile.write(b'{"access_token":"tru')
                self.close_connection = True

            def fault_html(self, *_):
                self.send(200, b"<html>maintenance</html>", [("Content-Type", "text/html")])

            def fault_error_field(self, *_):
                self.send(200, b'{"error":"temporarily_unavailable"}', [("Content-Type", "application/json")])

            def fault_redirect(self, *_):
                self.send(307, b"", [("Location", proxy.thief.url + "/steal")])

            def fault_echo(self, body, _):
                import urllib.parse as parse
                document = {"error": "invalid_request", "error_description": "you sent " + parse.unquote(body.decode())}
                self.send(400, json.dumps(document).encode(), [("Content-Type", "application/json")])

            def fault_oversize(self, *_):
                self.send(200, b'{"access_token":"' + b"x" * 300 * 1024 + b'"}', [("Content-Type", "application/json")])

        # In mode "pass": a change to each successful answer's JSON, and headers added to every answer.
        self.rewrite = None
        self.extra_headers = []
        self.thief = Recorder()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # resets and hangs are the point
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def calls(self, mode=None):
        with self.lock:
            return [t for t, m in self.requests if mode is None or m == mode]

    def stop(self):
        self.server.shutdown()
        self.thief.stop()


class Recorder:
    """Another origin: records every request it receives (what a redirect would leak)."""

    def __init__(self):
        self.received = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                recorder.received.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
