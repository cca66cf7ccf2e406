"""A provider's discovery document on loopback, for tests of what tokend and
tokenctl make of a provider (test_cli_advice, test_doctor): it names the
endpoints it is given and its own issuer, records each path asked, and can
date its answers `skew` seconds behind the real time."""
import email.utils
import http.server
import json
import threading
import time


class Discovery:
    def __init__(self, endpoints: dict[str, str], skew: int = 0) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def date_time_string(self, timestamp: float | None = None) -> str:
                return email.utils.formatdate(time.time() - skew, usegmt=True)

            def do_GET(self) -> None:
                outer.asked.append(self.path)
                body = json.dumps({"issuer": outer.issuer, **endpoints}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.asked: list[str] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
