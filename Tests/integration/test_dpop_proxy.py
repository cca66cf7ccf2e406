"""tokend-proxy with DPoP-bound tokens (RFC 9449): `Authorization: DPoP` and a
proof of each request from GetProof, one retry with a resource server's nonce
(no refresh), the nonce kept for the next requests. Against Glewlwyd with DPoP
and nonces required (its userinfo endpoint) and a resource server written here
that checks every claim of the proofs it gets, which the session lists in
proof-targets (GetProof signs for no other); a Bearer session is as before."""
import base64
import hashlib
import http.client
import http.server
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import free_port, wait_for
from provider2 import Agent
from test_dpop import device_login, make_daemon, provider, swtpm  # noqa: F401 (fixtures)
from test_dpop_tpm_slow import CHIP_DELAY, SlowTPM
from test_provider2 import Tokend2
from test_proxy import ProxyProcess


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def ath(token):
    return b64url(hashlib.sha256(token.encode()).digest())


class ResourceServer:
    """A resource server on 127.0.0.1 that demands DPoP (`dpop=True`) with a nonce of its own: a proof
    without its current nonce gets 401 use_dpop_nonce and the nonce; a proof with it is checked whole
    (signature, typ, alg, htm, htu, ath, jti never seen before, iat, the key's thumbprint) and answered 200
    with what it saw. With `dpop=False` it records the request and answers 200."""

    def __init__(self, thumbprint=None, dpop=True):
        self.thumbprint = thumbprint
        self.dpop = dpop
        self.nonce = "n-1"
        # Tokens answered 401 invalid_token (as if revoked), and whether proofs are refused outright.
        self.stale_tokens = set()
        self.refuse_proofs = False
        self.seen = []  # (method, path, headers, body) of every request, in order
        self.refusals = []
        self.jtis = set()
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.seen.append((self.command, self.path, dict(self.headers), body))
                    status, headers, answer = server.judge(self.command, self.path, self.headers, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = handle_one

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def judge(self, method, path, headers, body):
        if not self.dpop:
            return 200, {}, {"authorization": headers.get("Authorization"), "dpop": headers.get("DPoP")}
        from jwcrypto import jwk, jws
        authorization = headers.get("Authorization") or ""
        proof = headers.get("DPoP")
        if not authorization.startswith("DPoP ") or not proof or len(headers.get_all("DPoP") or []) != 1:
            return self.refuse("invalid_token", "no DPoP token with exactly one proof")
        token = authorization[5:]
        header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "=="))
        claims = json.loads(base64.urlsafe_b64decode(proof.split(".")[1] + "=="))
        if claims.get("nonce") != self.nonce:
            return 401, {"WWW-Authenticate": 'DPoP algs="ES256", error="use_dpop_nonce", '
                                             'error_description="Resource server requires nonce in DPoP proof"',
                         "DPoP-Nonce": self.nonce}, {"error": "use_dpop_nonce"}
        if self.refuse_proofs:
            return self.refuse("invalid_dpop_proof", "this server refuses every proof now")
        if token in self.stale_tokens:
            return 401, {"WWW-Authenticate": 'DPoP error="invalid_token"'}, {"error": "invalid_token"}
        key = jwk.JWK(**header["jwk"])
        checked = jws.JWS()
        checked.deserialize(proof)
        try:
            checked.verify(key, alg="ES256")
        except Exception as error:  # any failure to verify is a refusal, with its reason
            return self.refuse("invalid_dpop_proof", f"signature: {error}")
        expected_htu = self.url + path.split("?")[0].split("#")[0]
        problems = [what for what, ok in [
            ("typ", header.get("typ") == "dpop+jwt"), ("alg", header.get("alg") == "ES256"),
            ("htm", claims.get("htm") == method), ("htu", claims.get("htu") == expected_htu),
            ("ath", claims.get("ath") == ath(token)), ("jti", claims.get("jti") not in self.jtis),
            ("iat", abs(claims.get("iat", 0) - time.time()) < 120),
            ("thumbprint", key.thumbprint() == self.thumbprint)] if not ok]
        self.jtis.add(claims.get("jti"))
        if problems:
            return self.refuse("invalid_dpop_proof", f"{problems}: {claims} (htu expected {expected_htu})")
        return 200, {}, {"ok": True, "htu": claims["htu"], "ath": claims["ath"], "body": body.decode()}

    def refuse(self, error, why):
        self.refusals.append(why)
        return 401, {"WWW-Authenticate": f'DPoP error="{error}"'}, {"error": error, "why": why}

    def requests(self, method=None):
        with self.lock:
            return [r for r in self.seen if method is None or r[0] == method]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def resource_server():
    started = []

    def make(**options):
        server = ResourceServer(**options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def proxies(workdir):
    started = []

    def make(daemon, upstream, *extra):
        port = free_port()
        directory = os.path.join(workdir, f"proxy-{port}")
        os.makedirs(directory, exist_ok=True)
        proxy = ProxyProcess(daemon, upstream, directory, "--session", "g2", *extra, port=port)
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


def allowing(rs):
    """The session's line that lets GetProof sign for `rs` (proof-targets in tokend.toml): the proxy's
    upstream is a resource server the session allows."""
    return [f'proof-targets = ["{rs.url}/"]']


def through(proxy, method, target, body=None, headers=None, head=False):
    """One request through the proxy: its status and body (and its headers, with `head`)."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
    try:
        connection.request(method, target, body=body, headers={"Host": f"127.0.0.1:{proxy.port}", **(headers or {})})
        response = connection.getresponse()
        answer = response.read().decode()
        return (response.status, answer, dict(response.getheaders())) if head else (response.status, answer)
    finally:
        connection.close()


def test_through_the_proxy_glewlwyds_userinfo_opens_with_a_proof(provider, make_daemon, proxies):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    token = daemon.token()
    assert token["tokenType"] == "DPoP"
    # The token alone, as Bearer or as DPoP without a proof, opens nothing: Glewlwyd wants the proof.
    for scheme in ("Bearer", "DPoP"):
        alone = Agent(provider.base).request("GET", provider.issuer + "/userinfo",
                                             headers={"Authorization": f"{scheme} {token['accessToken']}"})
        assert alone.status == 401, (scheme, alone.status, alone.body)
    proxy = proxies(daemon, provider.base)
    refreshes = daemon.status()["refreshes"]
    for _ in range(3):
        status, body = through(proxy, "GET", "/api/oidc/userinfo")
        assert status == 200, (status, body, proxy.logs()[-2000:])
        assert json.loads(body)["email"] == "alice@example.test"
    assert daemon.status()["refreshes"] == refreshes, "a nonce retry is no refresh"
    assert "retried after a 401 with a refreshed token" not in proxy.logs()


def test_a_resource_servers_nonce_is_sent_once_asked_and_kept(provider, make_daemon, resource_server, proxies):
    rs = resource_server()
    daemon = make_daemon(provider, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url + "/api")
    before = daemon.status()
    status, body = through(proxy, "GET", "/data?x=1")
    assert status == 200, (status, body, rs.refusals, proxy.logs()[-2000:])
    assert json.loads(body)["htu"] == rs.url + "/api/data"
    # The first proof carried no nonce (401 use_dpop_nonce), the second the server's: two requests upstream.
    first = rs.requests()
    assert len(first) == 2 and [r[1] for r in first] == ["/api/data?x=1"] * 2, first
    # The nonce is kept: the next request opens with it, one request upstream.
    status, body = through(proxy, "GET", "/data")
    assert status == 200, (status, body, rs.refusals)
    assert len(rs.requests()) == 3
    # A POST meets a new nonce: it is sent again, with the same body, and the server saw both.
    rs.nonce = "n-2"
    payload = b'{"name": "a body the retry must carry whole"}' * 50
    status, body = through(proxy, "POST", "/echo", body=payload, headers={"Content-Type": "application/json"})
    assert status == 200, (status, body, rs.refusals)
    assert json.loads(body)["body"] == payload.decode()
    posts = rs.requests("POST")
    assert len(posts) == 2 and posts[0][3] == posts[1][3] == payload
    assert rs.refusals == [], rs.refusals
    # Every proof was new (the server refuses a jti seen before) and tokend refreshed nothing.
    after = daemon.status()
    assert (after["refreshes"], after["generation"]) == (before["refreshes"], before["generation"])


def test_the_proxy_never_retries_for_a_nonce_more_than_once(provider, make_daemon, resource_server, proxies):
    """A server that wants a new nonce each time: the second use_dpop_nonce goes to the client, with no refresh."""
    rs = resource_server()
    daemon = make_daemon(provider, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    judge = rs.judge

    def restless(*args):
        answer = judge(*args)
        rs.nonce = f"n-{len(rs.seen) + 1}"
        return answer

    rs.judge = restless
    proxy = proxies(daemon, rs.url)
    refreshes = daemon.status()["refreshes"]
    status, body = through(proxy, "GET", "/data")
    assert status == 401 and json.loads(body)["error"] == "use_dpop_nonce", (status, body)
    assert len(rs.requests()) == 2
    assert daemon.status()["refreshes"] == refreshes
    wait_for(lambda: "cannot send again" in proxy.logs(), 10, "the proxy's warning")


def test_a_401_invalid_token_refreshes_once_and_retries_with_a_new_proof(provider, make_daemon, resource_server, proxies):
    rs = resource_server()
    daemon = make_daemon(provider, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url)
    assert through(proxy, "GET", "/data")[0] == 200  # the nonce is known from here on
    old = daemon.token()
    rs.stale_tokens.add(old["accessToken"])
    before, seen = daemon.status()["refreshes"], len(rs.requests())
    status, body = through(proxy, "GET", "/data")
    assert status == 200, (status, body, rs.refusals, proxy.logs()[-2000:])
    new = daemon.token()
    # One refresh (DPoP-bound, at Glewlwyd), and the retry's proof is bound to the new token.
    assert new["generation"] == old["generation"] + 1 and new["accessToken"] != old["accessToken"]
    assert daemon.status()["refreshes"] == before + 1
    assert json.loads(body)["ath"] == ath(new["accessToken"])
    assert len(rs.requests()) == seen + 2 and rs.refusals == []


def test_a_refused_proof_goes_to_the_client_without_a_refresh(provider, make_daemon, resource_server, proxies):
    """401 invalid_dpop_proof: a refresh would not mend a proof; the client gets the 401 as it came."""
    rs = resource_server()
    daemon = make_daemon(provider, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url)
    assert through(proxy, "GET", "/data")[0] == 200
    rs.refuse_proofs = True
    before, seen = daemon.status()["refreshes"], len(rs.requests())
    status, body = through(proxy, "GET", "/data")
    assert status == 401 and json.loads(body)["error"] == "invalid_dpop_proof", (status, body)
    assert len(rs.requests()) == seen + 1
    assert daemon.status()["refreshes"] == before
    wait_for(lambda: "the upstream refused the DPoP proof" in proxy.logs(), 10, "the proxy's warning")


def test_a_key_the_tpm_cannot_reach_is_a_503_that_says_why(provider, make_daemon, swtpm, resource_server, proxies):
    tpm = swtpm()
    rs = resource_server()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url)
    assert through(proxy, "GET", "/data")[0] == 200
    seen = len(rs.requests())
    tpm.stop()
    for _ in range(3):
        status, body = through(proxy, "GET", "/data")
        assert status == 503 and "DPoP key cannot sign" in body and "TPM" in body, (status, body)
    # Nothing went upstream without a proof, and the log said it once.
    assert len(rs.requests()) == seen
    assert proxy.logs().count("no DPoP proof from tokend") == 1, proxy.logs()[-2000:]
    tpm.start()
    wait_for(lambda: through(proxy, "GET", "/data")[0] == 200, 30, "a proof once the TPM answers")


def test_a_bearer_session_through_the_proxy_sends_bearer_and_no_proof(provider, resource_server, proxies, workdir):
    os.makedirs(os.path.join(workdir, "bearer"), exist_ok=True)
    daemon = Tokend2(os.path.join(workdir, "bearer"), provider).start()
    try:
        device_login(daemon, provider)
        token = daemon.token()
        assert token["tokenType"].lower() == "bearer"
        rs = resource_server(dpop=False)
        proxy = proxies(daemon, rs.url)
        for _ in range(2):
            # A client's own DPoP header never crosses: the proxy alone puts credentials on requests.
            status, body = through(proxy, "GET", "/data", headers={"DPoP": "a-clients-own"})
            assert status == 200, (status, body)
            seen = json.loads(body)
            # The token type as the provider named it (Glewlwyd: "bearer"); schemes are case-insensitive.
            scheme, _, sent = seen["authorization"].partition(" ")
            assert (scheme.lower(), sent, seen["dpop"]) == ("bearer", token["accessToken"], None), seen
        assert all("DPoP" not in headers and "Dpop" not in headers for _, _, headers, _ in rs.requests())
    finally:
        daemon.stop(signal.SIGKILL)


def test_a_refused_proof_is_a_clear_status_logged_once(provider, make_daemon, swtpm, resource_server, proxies):
    """Over tokend's rate bound on proofs (GetProof, per person and session) the proxy answers 503 with
    Retry-After and says why; its log says it once, not once per request. The key is in a TPM as slow as a
    discrete chip (test_dpop_tpm_slow's relay): the bound follows the measured signing time (a quarter of what
    the chip signs a second, per person and session), far below these 120 requests. (swtpm alone signs in a
    millisecond: its bound is hundreds a second; a key in the state allows bursts of 400.)"""
    tpm = SlowTPM(swtpm(), CHIP_DELAY)
    rs = resource_server()
    daemon = make_daemon(provider, dpop_key="tpm", tpm=tpm.tcti, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url)
    # Under the bound: the request and its retry with the server's nonce (two proofs) get through.
    first = through(proxy, "GET", "/data", head=True)
    assert first[0] == 200, first
    results = []

    def one():
        results.append(through(proxy, "GET", "/data", head=True))

    threads = [threading.Thread(target=one) for _ in range(120)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    tpm.close()
    assert len(results) == 120
    limited = [(body, headers) for status, body, headers in results if status == 503]
    assert limited and {status for status, _, _ in results} <= {200, 503}, sorted(status for status, _, _ in results)
    assert all("tokend bounds this user's DPoP proofs" in body and int(headers["Retry-After"]) >= 1
               for body, headers in limited), limited[:2]
    assert rs.refusals == []
    assert proxy.logs().count("no DPoP proof from tokend") == 1, proxy.logs()[-3000:]


def test_a_nonce_longer_than_a_proof_takes_does_not_wedge_the_proxy(provider, make_daemon, resource_server, proxies):
    """A resource server's nonce over GetProof's limit (1024 bytes) is not kept: the request that met it
    gets the server's 401, and the next ones reach the server again, which can give a short nonce. (The
    proxy used to keep nonces up to 2048 bytes and send every later request to GetProof with it, which
    refused it: 400 for every request, none reaching the server again.)"""
    rs = resource_server()
    daemon = make_daemon(provider, session_lines=allowing(rs)).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    proxy = proxies(daemon, rs.url)
    assert through(proxy, "GET", "/data")[0] == 200
    rs.nonce = "n" * 1500  # visible ASCII: a legal NQCHAR string, over GetProof's 1024 bytes
    seen = len(rs.requests())
    status, body = through(proxy, "GET", "/data")
    assert status == 401 and json.loads(body)["error"] == "use_dpop_nonce", (status, body)
    assert len(rs.requests()) == seen + 1
    wait_for(lambda: "cannot send again" in proxy.logs(), 10, "the proxy's warning")
    rs.nonce = "n-3"
    seen = len(rs.requests())
    for _ in range(3):
        status, body = through(proxy, "GET", "/data")
        assert status == 200, (status, body, rs.refusals, proxy.logs()[-2000:])
    # The first met the server's new nonce (401, then once more with it), the next two carried it.
    assert len(rs.requests()) == seen + 4, rs.requests()[seen:]
    assert rs.refusals == [], rs.refusals
