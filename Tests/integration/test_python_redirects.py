"""The Python auth classes send tokens only where they were asked to (issue 49):
a redirect to another origin answering 401 gets no token — neither the one the
first request carried (requests strips it) nor a freshly refreshed one (the
requests auth's retry hook rode along on the redirect and refreshed for it); and
neither auth class refreshes for another origin's 401 (httpx's did, and retried)."""
import http.server
import json
import threading

import httpx
import requests

from conftest import login
from tokend_client import Tokend, httpx_auth, requests_auth


class Recorder(http.server.ThreadingHTTPServer):
    """A server on `host` that answers every request with `answer(path)`: (status, headers)."""

    def __init__(self, host, answer):
        self.seen = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.seen.append(self.headers.get("Authorization"))
                status, headers = answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__((host, 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def test_a_redirect_to_another_host_that_answers_401_gets_no_token(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    elsewhere = Recorder("127.0.0.2", lambda path: (401, {"WWW-Authenticate": "Bearer"}))
    origin = Recorder("127.0.0.1", lambda path: (302, {"Location": elsewhere.base + "/taken"}))
    try:
        tokend = Tokend(socket=daemon.socket)
        refreshes = json.loads(daemon.ctl("status", "--json").stdout)["refreshes"]
        answer = requests.get(origin.base + "/start", auth=requests_auth.TokendAuth(tokend), timeout=10)
        assert answer.status_code == 401 and answer.url == elsewhere.base + "/taken"
        with httpx.Client(auth=httpx_auth.TokendAuth(tokend=tokend), follow_redirects=True, timeout=10) as client:
            assert client.get(origin.base + "/start").status_code == 401
        assert origin.seen[0] and origin.seen[0].startswith("Bearer "), "the origin got the token"
        assert len(elsewhere.seen) == 2 and elsewhere.seen == [None, None], elsewhere.seen
        assert json.loads(daemon.ctl("status", "--json").stdout)["refreshes"] == refreshes, "no refresh for its 401"
    finally:
        origin.shutdown()
        elsewhere.shutdown()


def test_a_401_from_the_origin_itself_is_still_retried_once_with_a_fresh_token(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    origin = Recorder("127.0.0.1", lambda path: (401, {}))
    try:
        tokend = Tokend(socket=daemon.socket)
        answer = requests.get(origin.base + "/x", auth=requests_auth.TokendAuth(tokend), timeout=10)
        assert answer.status_code == 401 and len(origin.seen) == 2, origin.seen
        assert origin.seen[0] != origin.seen[1], "the retry carried the refreshed token"
    finally:
        origin.shutdown()
