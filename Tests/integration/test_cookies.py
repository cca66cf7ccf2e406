"""Session cookies against the real authorization server, whose refresh
answers set, replace and delete cookies (authserver.middleware.SessionCookies)."""
import http.server
import json
import os
import socket
import subprocess
import threading

from conftest import login, read_frame, wait_for

def subscribe(path, since=None):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    parameters = {} if since is None else {"sinceVersion": since}
    s.sendall(json.dumps({"method": "io.tokend.Broker.Subscribe", "parameters": parameters, "more": True}).encode()
              + b"\0")
    first = json.loads(read_frame(s))["parameters"]
    assert first["event"] == "status"
    return s, first


def buffered_frames(s):
    """The frames already waiting on the socket, without blocking."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    from conftest import _unread
    data = _unread.pop(s, b"") + data
    return [json.loads(frame)["parameters"] for frame in data.split(b"\0") if frame]


def changes(event):
    return [(c["action"], c["cookie"]["name"]) for c in event["changes"]]


def test_refresh_cookies_reach_subscribers_before_the_caller_and_go_back(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)  # refresh 1: the server sets sid=1, csrf, tracker
    url = server.token_url
    _, reply = daemon.call("io.tokend.Broker.GetCookies", url=url)
    jar = reply["parameters"]
    assert [c["name"] for c in jar["cookies"]] == ["csrf", "sid", "tracker"], jar
    assert jar["header"].startswith("csrf=c") and "sid=1" in jar["header"]
    sid = next(c for c in jar["cookies"] if c["name"] == "sid")
    assert sid["path"] == "/" and sid["httpOnly"] and sid["sameSite"] == "Lax" and sid["hostOnly"]
    assert sid["expiresAt"] is not None
    assert next(c for c in jar["cookies"] if c["name"] == "csrf")["expiresAt"] is None, "a session cookie"

    watcher, status = subscribe(daemon.socket)
    assert status["version"] == jar["version"]
    _, refreshed = daemon.call("io.tokend.Broker.Refresh")
    assert "error" not in refreshed, refreshed
    # The caller has its token: the subscriber's events must already be on its socket.
    events = buffered_frames(watcher)
    assert [e["event"] for e in events] == ["cookies", "refreshed"], events
    assert changes(events[0]) == [("set", "sid"), ("delete", "tracker")]
    assert events[0]["changes"][0]["cookie"]["value"] == "2"
    assert events[0]["version"] == jar["version"] + 2 == events[1]["version"]
    assert events[1]["generation"] == refreshed["parameters"]["token"]["generation"]
    watcher.close()

    # The jar went back to the server with the refresh.
    sent = server.grants("refresh_token")[-1]["cookie"]
    assert "sid=1" in sent and "tracker=1" in sent and "csrf=" in sent
    _, reply = daemon.call("io.tokend.Broker.GetCookies", url=url)
    assert [c["name"] for c in reply["parameters"]["cookies"]] == ["csrf", "sid"]


def test_cookies_survive_restart_and_logout_deletes_all(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    before = daemon.call("io.tokend.Broker.GetCookies", url=server.token_url)[1]["parameters"]
    daemon.stop()
    daemon.start()
    after = daemon.call("io.tokend.Broker.GetCookies", url=server.token_url)[1]["parameters"]
    assert after == before, "persistent and session cookies both survive a restart"

    watcher, status = subscribe(daemon.socket)
    result = daemon.ctl("logout", "--no-revoke")
    assert result.returncode == 0, result.stderr
    events = [json.loads(read_frame(watcher))["parameters"] for _ in range(2)]
    assert [e["event"] for e in events] == ["cookies", "loggedOut"]
    assert sorted(changes(events[0])) == [("delete", "csrf"), ("delete", "sid"), ("delete", "tracker")]
    watcher.close()
    assert daemon.call("io.tokend.Broker.GetCookies", url=server.token_url)[1]["parameters"]["cookies"] == []
    state = open(os.path.join(daemon.state, "default.session")).read()
    assert "sid" not in state and "tracker" not in state


class EchoCookie(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.headers.get("Cookie") or "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_import_export_and_curl_sends_the_same_header(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    login(daemon, server)
    echo = http.server.HTTPServer(("127.0.0.1", 0), EchoCookie)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{echo.server_port}/app/page"
    try:
        _, reply = daemon.call("io.tokend.Broker.ImportCookies", url=page, setCookie=[
            "pref=dark; Path=/app; Max-Age=600", "lang=en; Path=/", "bad=1; Domain=example.com", "theme"])
        result = reply["parameters"]
        assert result["applied"] == 2
        assert result["rejected"] == [
            "setCookie[2] (bad): Domain does not match the request host",
            "setCookie[3]: not a cookie (empty name and value, or a control character)"]

        header = daemon.ctl("cookies", page)
        assert header.returncode == 0, header.stderr
        # Cookies ignore ports (RFC 6265 §8.5): the auth server's Path=/ cookies on
        # 127.0.0.1 match too. Longest path first, then oldest first.
        expected = "pref=dark; sid=1; tracker=1; lang=en"
        assert header.stdout.strip() == expected
        listed = json.loads(daemon.ctl("cookies", page, "--json").stdout)
        assert listed["header"] == expected and len(listed["cookies"]) == 4

        exported = daemon.ctl("cookies", "--export", "netscape")
        assert exported.returncode == 0, exported.stderr
        jar = os.path.join(workdir, "cookies.txt")
        with open(jar, "w") as f:
            f.write(exported.stdout)
        for url in (page, server.token_url.replace(f":{server.port}/", f":{echo.server_port}/")):
            curl = subprocess.run(["curl", "-sS", "-b", jar, url], capture_output=True, text=True, timeout=30)
            assert curl.returncode == 0, curl.stderr
            ours = daemon.call("io.tokend.Broker.GetCookies", url=url)[1]["parameters"]["header"]
            # The same cookies and values. The order can differ among cookies of
            # equal path length: RFC 6265 puts older first, curl longer names first.
            assert ours and sorted(curl.stdout.split("; ")) == sorted(ours.split("; ")), (url, curl.stdout, ours)
            assert curl.stdout.split("; ")[0] == ours.split("; ")[0], "longest path first in both"
    finally:
        echo.shutdown()


def test_reconnecting_subscriber_catches_up(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    version = daemon.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]["cookieVersion"]
    daemon.call("io.tokend.Broker.Refresh")  # sid replaced, tracker deleted: two changes
    watcher, status = subscribe(daemon.socket, since=version)
    missed = json.loads(read_frame(watcher))["parameters"]
    assert missed["event"] == "cookies" and not missed.get("snapshot")
    assert changes(missed) == [("set", "sid"), ("delete", "tracker")]
    watcher.close()
    daemon.stop()
    daemon.start()
    watcher, _ = subscribe(daemon.socket, since=version)
    snapshot = json.loads(read_frame(watcher))["parameters"]
    assert snapshot["snapshot"] is True, "a restart empties the change log: the whole jar instead"
    assert sorted(changes(snapshot)) == [("set", "csrf"), ("set", "sid")]
    watcher.close()


def test_bad_cookie_calls_get_clear_errors(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    _, reply = daemon.call("io.tokend.Broker.GetCookies", url="ftp://x/")
    assert reply["error"] == "io.tokend.Broker.InvalidURL" and reply["parameters"]["url"] == "ftp://x/"
    _, reply = daemon.call("io.tokend.Broker.ExportCookies", format="json")
    assert reply["error"] == "io.tokend.Broker.UnknownFormat"
    _, reply = daemon.call("io.tokend.Broker.ImportCookies", url="http://127.0.0.1/", setCookie="a=1")
    assert reply["error"] == "org.varlink.service.InvalidParameter"
    result = daemon.ctl("cookies", "not a url")
    assert result.returncode == 1 and "not an http:// or https:// URL" in result.stderr
    result = daemon.ctl("cookies")
    assert result.returncode == 64 and "give a URL" in result.stderr


def test_accept_policy_applies_to_endpoint_cookies_and_imports(server, make_tokend):
    never = make_tokend(server, **{"accept-cookies": '"never"'}).start()
    login(never, server)
    url = server.base + "/"
    assert never.call("io.tokend.Broker.GetCookies", url=url)[1]["parameters"]["cookies"] == []
    reply = never.call("io.tokend.Broker.ImportCookies", url=url, setCookie=["a=1"])[1]["parameters"]
    assert reply["applied"] == 0 and "never" in reply["rejected"][0]
    wait_for(lambda: "cookie from token endpoint refused" in never.logs(), 5, "refusals logged")
    never.stop()


def test_same_domain_policy_refuses_parent_domain_cookies(server, make_tokend):
    daemon = make_tokend(server, **{"accept-cookies": '"same-domain"'}).start()
    login(daemon, server)
    reply = daemon.call("io.tokend.Broker.ImportCookies", url="https://app.example.com/",
                        setCookie=["host=1", "parent=1; Domain=example.com"])[1]["parameters"]
    assert reply["applied"] == 1 and "same-domain" in reply["rejected"][0]
    # The token endpoint's own (host-only) cookies are still taken.
    assert {c["name"] for c in daemon.call("io.tokend.Broker.GetCookies", url=server.base + "/")[1]
            ["parameters"]["cookies"]} >= {"sid"}
