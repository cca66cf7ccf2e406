"""tokend-native-host driven on its pipes as a browser drives it: native
messaging framing, the caller check, the origin checks, the input bound, the
1 MiB output split, and exit when stdin closes."""
import json
import os
import signal
import struct
import subprocess
import time

from conftest import BIN, login, wait_for
from resources import password_grant

EXTENSION = "chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/"
B = "io.tokend.Broker."


class Host:
    def __init__(self, daemon, caller=EXTENSION):
        self.process = subprocess.Popen(
            [os.path.join(BIN, "tokend-native-host"), caller], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(os.environ, TOKEND_SOCKET=daemon.socket))

    def send(self, message):
        body = json.dumps(message).encode() if isinstance(message, dict) else message
        self.process.stdin.write(struct.pack("=I", len(body)) + body)
        self.process.stdin.flush()

    def receive(self):
        header = self.process.stdout.read(4)
        assert len(header) == 4, self.process.stderr.read()
        length = struct.unpack("=I", header)[0]
        assert length <= 1024 * 1024
        return json.loads(self.process.stdout.read(length))

    def call(self, method, origin=None, **parameters):
        self.send({"id": 1, "method": method, "parameters": parameters, "origin": origin})
        return self.receive()


def test_host_relays_checks_and_bounds(server, make_tokend):
    daemon = make_tokend(server, **{"web-origins": '["http://127.0.0.1:8123"]'}).start()
    login(daemon, server)
    stranger = subprocess.run([os.path.join(BIN, "tokend-native-host"), "chrome-extension://someoneelse/"],
                              capture_output=True, text=True, timeout=10, input="")
    assert stranger.returncode == 1 and "refusing caller" in stranger.stderr
    host = Host(daemon)
    expected = daemon.call(B + "GetToken")[1]["parameters"]["token"]
    assert host.call("GetToken", origin="http://127.0.0.1:8123")["parameters"]["token"] == expected
    assert host.call("GetToken", origin="http://127.0.0.1:9999")["error"] == "org.varlink.service.PermissionDenied"
    assert host.call("GetToken")["error"] == "org.varlink.service.PermissionDenied"
    assert host.call("Login", refreshToken="x")["error"] == "io.tokend.Bridge.MethodNotAllowed"
    assert host.call("GetCookies", url="http://evil.example/")["error"] == "org.varlink.service.PermissionDenied"
    assert "cookies" in host.call("GetCookies", url="http://127.0.0.1:8123/")["parameters"]
    # A message over the 1 MiB bound is dropped with an error; the next one is served.
    host.send(b'{"id": 2, "method": "GetToken", "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert host.receive()["error"] == "io.tokend.Bridge.RequestTooLarge"
    assert host.call("GetStatus")["parameters"]["status"]["webOrigins"] == ["http://127.0.0.1:8123"]
    # stdin closed: the host exits by itself.
    host.process.stdin.close()
    assert host.process.wait(5) == 0


def test_large_cookie_events_are_split_under_one_mebibyte(server, make_tokend):
    daemon = make_tokend(server, **{"web-origins": '["http://127.0.0.1:8123"]'}).start()
    login(daemon, server)
    value = "v" * 4000
    for host_index in range(6):
        url = f"http://h{host_index}.example.test/"
        reply = daemon.call(B + "ImportCookies", url=url,
                            setCookie=[f"c{i}={value}; Max-Age=3600" for i in range(50)])[1]
        assert reply["parameters"]["applied"] == 50, reply
    host = Host(daemon)
    host.send({"id": 5, "method": "Subscribe", "parameters": {"sinceVersion": 0}})
    status = host.receive()
    assert status["parameters"]["event"] == "status"
    pieces = []
    while True:
        piece = host.receive()
        pieces.append(piece)
        if not piece.get("partial"):
            break
    assert len(pieces) >= 2
    assert all(p["id"] == 5 and p["parameters"]["event"] == "cookies" for p in pieces)
    assert sum(len(p["parameters"]["changes"]) for p in pieces) >= 300
    host.process.stdin.close()
    assert host.process.wait(5) == 0


def test_pages_get_tokens_for_their_web_resources_only(server, make_tokend, workdir):
    """A session serving two resources, one of which web pages may ask for (web-resources): the host
    passes that one (and a scope) to tokend and refuses the other before tokend is asked. The grant
    covers the shared one only, so its tokens' audience (introspected) is within web-resources: pages
    get them (test_audience.py has grants whose tokens cover both)."""
    app = "http://127.0.0.1:8123"
    shared, private = "https://shared.api.test/", "https://private.api.test/"
    daemon = make_tokend(server, **{"web-origins": json.dumps([app]), "scope": '"read write"',
                                    "resources": json.dumps([shared, private]),
                                    "introspection-endpoint": json.dumps(server.base + "/o/introspect/"),
                                    "web-resources": json.dumps([shared])}).start()
    status, grant = password_grant(server, [shared], "read write")
    assert status == 200, grant
    assert "error" not in daemon.call(B + "Login", refreshToken=grant["refresh_token"])[1]
    host = Host(daemon)
    assert host.call("GetStatus")["parameters"]["status"]["webResources"] == [shared]
    token = host.call("GetToken", origin=app, resource=shared)["parameters"]["token"]
    assert token["resource"] == shared
    assert daemon.call(B + "GetToken", resource=shared)[1]["parameters"]["token"] == token, "tokend's token for that key"
    fresh = host.call("Refresh", origin=app, resource=shared, staleGeneration=token["generation"])["parameters"]["token"]
    assert fresh["resource"] == shared and fresh["generation"] == token["generation"] + 1
    narrow = host.call("GetToken", origin=app, resource=shared, scope="read")["parameters"]["token"]
    assert narrow["resource"] == shared and "read" in narrow["scope"].split()
    beyond = host.call("GetToken", origin=app, resource=shared, scope="read admin")
    assert beyond["error"] == B + "ScopeNotAllowed", beyond  # tokend's own check, relayed
    # Refused here: a resource of the session that pages may not have, one of no session, one that is no string.
    upstream = len(server.grants())
    for resource in (private, "https://elsewhere.test/"):
        for method in ("GetToken", "Refresh"):
            refused = host.call(method, origin=app, resource=resource)
            assert refused["error"] == "org.varlink.service.PermissionDenied", refused
            assert refused["parameters"]["resource"] == resource and "web-resources" in refused["parameters"]["reason"]
    assert host.call("GetToken", origin=app, resource=5)["error"] == "org.varlink.service.PermissionDenied"
    assert host.call("GetToken", origin="http://127.0.0.1:9999", resource=shared) == \
        {"id": 1, "error": "org.varlink.service.PermissionDenied", "parameters": {}}, "an origin refused as before"
    assert len(server.grants()) == upstream, "no upstream call for a refused resource"
    keys = {t.get("resource") for t in daemon.call(B + "GetStatus")[1]["parameters"]["status"]["tokens"]}
    assert private not in keys, "tokend was never asked for it"
    # A call without a resource is the session's token, as before.
    own = host.call("GetToken", origin=app)["parameters"]["token"]
    assert own.get("resource") is None and own == daemon.call(B + "GetToken")[1]["parameters"]["token"]
    # The configuration changes (SIGHUP): the host asks tokend again rather than trust what it knew.
    with open(daemon.config) as f:
        text = f.read()
    with open(daemon.config, "w") as f:
        f.write(text.replace(f"web-resources = {json.dumps([shared])}", f"web-resources = {json.dumps([shared, private])}"))
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.call(B + "GetStatus")[1]["parameters"]["status"]["webResources"] == [shared, private],
             10, "the reloaded web-resources")
    # Passed to tokend now; the grant does not cover it, and tokend says so.
    token = host.call("GetToken", origin=app, resource=private)
    assert token["error"] in (B + "ResourceNotAllowed", B + "TargetRefused"), token
    assert token["parameters"]["resource"] == private and "web-resources" not in token["parameters"]["reason"], token
    host.process.stdin.close()
    assert host.process.wait(5) == 0
