"""A second real provider: Glewlwyd (Debian's `glewlwyd` package, a C OAuth 2 /
OpenID Connect server), on a free loopback port from a temporary directory,
configured as strictly as it allows: one-use refresh tokens (a replay disables
the newest token of the chain), no grace period, no rolling expiry, PKCE
required, replayed codes revoke their tokens.

Everything is set up the way an administrator and a user would: the database
from the package's own schema, then the admin API (scopes, users, the OIDC
plugin, the clients), then the user's own session and profile API (log in,
grant, approve a device, revoke a refresh token)."""
from __future__ import annotations

import base64
import gzip
import hashlib
import http.cookiejar
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
PROVIDER2 = os.path.join(HERE, "..", "provider2")
GLEWLWYD = "/usr/bin/glewlwyd"
SCHEMA = "/usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz"
ADMIN_PASSWORD = "password"  # the package schema's default administrator
PLUGIN = "oidc"
USER, PASSWORD, EMAIL = "alice", "alice-password", "alice@example.test"
SCOPE = "openid tokend"
CLIENT_ID, CLIENT_SECRET = "tokend-g2", "tokend-g2-secret"
PUBLIC_CLIENT_ID = "tokend-g2-public"
KEY_CLIENT_ID = "tokend-g2-key"  # private_key_jwt (RFC 7523), with Glewlwyd(keys=True)
DPOP_CLIENT_ID = "tokend-g2-dpop"  # DPoP required (RFC 9449), with Glewlwyd(dpop=True)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Reply:
    status: int
    body: bytes
    headers: Any

    def json(self) -> Any:
        return json.loads(self.body)


class Agent:
    """A plain HTTP client with a cookie jar that does not follow redirects:
    the administrator's or the user's browser, minus the JavaScript."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), NoRedirect)

    def request(self, method: str, path: str, body: Any = None, form: dict | None = None,
                headers: dict | None = None) -> Reply:
        url = path if path.startswith("http") else self.base + path
        data = None
        request_headers = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            request_headers["Content-Type"] = "application/json"
        elif form is not None:
            data = urllib.parse.urlencode(form).encode()
            request_headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(url, data=data, method=method, headers=request_headers)
        try:
            with self.opener.open(request, timeout=10) as response:
                return Reply(response.status, response.read(), response.headers)
        except urllib.error.HTTPError as error:
            return Reply(error.code, error.read(), error.headers)

    def ok(self, method: str, path: str, body: Any = None) -> Reply:
        reply = self.request(method, path, body)
        assert reply.status == 200, f"{method} {path}: {reply.status} {reply.body!r}"
        return reply


def _run(command: list[str], **kwargs: Any) -> None:
    subprocess.run(command, check=True, capture_output=True, **kwargs)


class CountingFront:
    """An HTTP front on its own loopback port that forwards every request to
    Glewlwyd on `backend` as it came (no redirect followed) and records each
    one's method and path before forwarding it."""

    def __init__(self, backend: int) -> None:
        import http.client
        import http.server
        import threading

        self.backend = backend
        self.lock = threading.Lock()
        self.recorded: list[tuple[str, str]] = []
        front = self

        class Forward(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def forward(self) -> None:
                with front.lock:
                    front.recorded.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                upstream = http.client.HTTPConnection("127.0.0.1", front.backend, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for key, value in answer.getheaders():
                        if key.lower() not in ("transfer-encoding", "content-length", "connection", "keep-alive"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.recorded)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Glewlwyd:
    """One Glewlwyd instance in `directory` on 127.0.0.1:`port`."""

    def __init__(self, directory: str, access_ttl: int = 3600, port: int | None = None, keys: bool = False,
                 dpop: bool = False, counted: bool = False) -> None:
        """`keys`: also accept client assertions (private_key_jwt) and register
        KEY_CLIENT_ID with the public key in `client_key_path`. `dpop`: turn
        DPoP on with nonces mandatory, and register DPOP_CLIENT_ID, a client
        whose every token request must carry a proof. `counted`: every request
        reaches Glewlwyd through a `CountingFront`, whose address is the
        provider's (issuer, endpoints, DPoP htu), so `requests()` is every
        request the provider received, answered or refused."""
        self.dpop = dpop
        self.front: CountingFront | None = None
        # The environment the server runs in (None: the test's own); see test_dpop's clock test.
        self.environment: dict | None = None
        assert os.path.exists(GLEWLWYD), "Debian's glewlwyd package is not installed (make deps installs it)"
        self.directory = directory
        self.keys = keys
        os.makedirs(directory, exist_ok=True)
        self.config = os.path.join(directory, "glewlwyd.conf")
        if port is None and os.path.exists(self.config):
            with open(self.config) as f:
                port = int(next(line for line in f if line.startswith("port="))[5:])
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        if counted:
            self.front = CountingFront(self.port)
            self.base = self.front.base
        self.access_ttl = access_ttl
        self.db_path = os.path.join(directory, "glewlwyd.sqlite3")
        self.log_path = os.path.join(directory, "glewlwyd.log")
        self.process: subprocess.Popen | None = None
        if not os.path.exists(self.db_path):
            with gzip.open(SCHEMA, "rb") as f:
                schema = f.read().decode()
            with sqlite3.connect(self.db_path) as db:
                db.executescript(schema)
            self._write_config()
            self._write_keys()
            self.start()
            try:
                self._configure()
            except BaseException:
                self.stop()
                raise
        else:
            self.start()

    # --- the process ---

    @property
    def issuer(self) -> str:
        """The OIDC issuer: an issuer with a path, discovery at {issuer}/.well-known/openid-configuration."""
        return f"{self.base}/api/{PLUGIN}"

    @property
    def token_url(self) -> str:
        return self.issuer + "/token"

    def _write_config(self) -> None:
        with open(os.path.join(PROVIDER2, "glewlwyd.conf")) as f:
            template = f.read()
        text = (template.replace("@PORT@", str(self.port)).replace("@BASE@", self.base)
                .replace("@LOG@", self.log_path).replace("@DB@", self.db_path))
        with open(self.config, "w") as f:
            f.write(text)

    def _write_keys(self) -> None:
        key = os.path.join(self.directory, "signing.key")
        _run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key])
        _run(["openssl", "pkey", "-in", key, "-pubout", "-out", key + ".pub"])
        client = self.client_key_path
        _run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", client])
        _run(["openssl", "pkey", "-in", client, "-pubout", "-out", client + ".pub"])

    @property
    def client_key_path(self) -> str:
        """KEY_CLIENT_ID's private key (EC P-256, PEM)."""
        return os.path.join(self.directory, "client.key")

    def start(self) -> "Glewlwyd":
        with open(self.log_path + ".err", "a") as errors:
            self.process = subprocess.Popen([GLEWLWYD, "--config-file", self.config], env=self.environment,
                                            stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"glewlwyd exited {self.process.returncode}: {self.logs()[-2000:]}")
            try:
                with urllib.request.urlopen(self.base + "/config", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("glewlwyd did not answer")

    def requests(self, *paths: str) -> list[tuple[str, str]]:
        """(method, path) of every request that reached the provider at the
        issuer's `paths` ("token", "revoke"); needs `counted`."""
        assert self.front, "Glewlwyd(counted=True) counts requests"
        wanted = {f"/api/{PLUGIN}/{path}" for path in paths}
        return [(method, path) for method, path in self.front.seen() if path.split("?")[0].rstrip("/") in wanted]

    def stop(self) -> None:
        if self.front:
            self.front.stop()
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def logs(self) -> str:
        text = ""
        for path in (self.log_path, self.log_path + ".err"):
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += f.read()
        return text

    # --- the administrator's part ---

    def _configure(self) -> None:
        admin = Agent(self.base)
        admin.ok("POST", "/api/auth/", {"username": "admin", "password": ADMIN_PASSWORD})
        # Every scope tokend asks for needs the user's password.
        admin.ok("PUT", "/api/scope/openid", {"name": "openid", "display_name": "Open ID", "description": "OpenID Connect",
                                             "password_required": True, "password_max_age": 0, "scheme": {}})
        admin.ok("POST", "/api/scope/", {"name": "tokend", "display_name": "tokend", "description": "tokend's API",
                                         "password_required": True, "password_max_age": 0, "scheme": {}})
        admin.ok("POST", "/api/user/", {"username": USER, "name": "Alice", "email": EMAIL, "enabled": True,
                                        "password": PASSWORD, "scope": ["openid", "tokend", "g_profile"]})
        with open(os.path.join(PROVIDER2, "oidc-plugin.json")) as f:
            parameters = json.load(f)
        with open(os.path.join(self.directory, "signing.key")) as f:
            parameters["key"] = f.read()
        with open(os.path.join(self.directory, "signing.key.pub")) as f:
            parameters["cert"] = f.read()
        parameters["iss"] = self.issuer
        parameters["access-token-duration"] = self.access_ttl
        if self.keys:
            # Client assertions are accepted only with request objects allowed,
            # and are checked against the client's "pubkey" property.
            parameters["request-parameter-allow"] = True
            parameters["client-pubkey-parameter"] = "pubkey"
        if self.dpop:
            # Proofs are checked only on requests that carry one, and required of the
            # clients whose property names it: the clients without it are as before.
            parameters.update({"oauth-dpop-allowed": True, "oauth-dpop-iat-duration": 60,
                               "oauth-dpop-nonce-mandatory": True, "oauth-dpop-nonce-counter": 3,
                               "oauth-dpop-dpop_bound_access_tokens-property": "dpop_bound_access_tokens"})
            module = admin.ok("GET", "/api/mod/client/database").json()
            module["parameters"]["data-format"]["dpop_bound_access_tokens"] = {
                "multiple": False, "read": True, "write": True}
            admin.ok("PUT", "/api/mod/client/database", module)
        admin.ok("POST", "/api/mod/plugin/", {"module": "oidc", "name": PLUGIN, "display_name": "OIDC",
                                              "enabled": True, "parameters": parameters})
        common = {"enabled": True, "scope": ["openid", "tokend"],
                  "redirect_uri": ["http://127.0.0.1/callback", "http://localhost/callback"],
                  "authorization_type": ["code", "refresh_token", "device_authorization"]}
        admin.ok("POST", "/api/client/", {"client_id": CLIENT_ID, "name": "tokend (confidential)",
                                          "confidential": True, "password": CLIENT_SECRET,
                                          "client_secret": CLIENT_SECRET,
                                          "token_endpoint_auth_method": ["client_secret_basic", "client_secret_post"],
                                          **common})
        admin.ok("POST", "/api/client/", {"client_id": PUBLIC_CLIENT_ID, "name": "tokend (public)",
                                          "confidential": False, "token_endpoint_auth_method": ["none"], **common})
        if self.keys:
            with open(self.client_key_path + ".pub") as f:
                pubkey = f.read()
            admin.ok("POST", "/api/client/", {"client_id": KEY_CLIENT_ID, "name": "tokend (key)", "confidential": True,
                                              "token_endpoint_auth_method": ["private_key_jwt"], "pubkey": pubkey,
                                              **common})

        if self.dpop:
            admin.ok("POST", "/api/client/", {"client_id": DPOP_CLIENT_ID, "name": "tokend (DPoP)",
                                              "confidential": True, "password": CLIENT_SECRET,
                                              "client_secret": CLIENT_SECRET,
                                              "token_endpoint_auth_method": ["client_secret_basic"],
                                              "dpop_bound_access_tokens": "true", **common})

    # --- the user's part ---

    def user(self) -> Agent:
        """The user's browser, logged in to Glewlwyd, with the client granted the scopes."""
        agent = Agent(self.base)
        agent.ok("POST", "/api/auth/", {"username": USER, "password": PASSWORD})
        for client in ((CLIENT_ID, PUBLIC_CLIENT_ID) + ((KEY_CLIENT_ID,) if self.keys else ())
                       + ((DPOP_CLIENT_ID,) if self.dpop else ())):
            agent.ok("PUT", f"/api/auth/grant/{client}", {"scope": SCOPE})
        return agent

    def approve_device(self, user_code: str, agent: Agent | None = None) -> Reply:
        """The user enters the code at the verification page; Glewlwyd then
        redirects to its "device complete" page."""
        agent = agent or self.user()
        query = urllib.parse.urlencode({"code": user_code, "g_continue": ""})
        reply = agent.request("GET", f"/api/{PLUGIN}/device?" + query)
        location = reply.headers.get("Location", "") if reply.headers else ""
        assert reply.status == 302 and "prompt=deviceComplete" in location, (reply.status, location, reply.body)
        return reply

    def authorize(self, url: str, agent: Agent | None = None) -> str:
        """Follows an authorization URL as the logged-in user; returns where
        Glewlwyd sends the browser (the client's redirect URI with the code)."""
        agent = agent or self.user()
        # Glewlwyd's login page sends the browser back with g_continue once the
        # user has logged in and granted the scopes; we did both through the API.
        reply = agent.request("GET", url + "&g_continue")
        location = reply.headers.get("Location", "") if reply.headers else ""
        assert reply.status == 302 and "code=" in location, (reply.status, location, reply.body)
        return location

    def add_redirect_uri(self, client_id: str, uri: str) -> None:
        """The administrator registers one more exact redirect URI for a client."""
        admin = Agent(self.base)
        admin.ok("POST", "/api/auth/", {"username": "admin", "password": ADMIN_PASSWORD})
        client = admin.ok("GET", f"/api/client/{client_id}").json()
        client["redirect_uri"] = client["redirect_uri"] + [uri]
        client.pop("source", None)
        admin.ok("PUT", f"/api/client/{client_id}", client)

    def refresh_tokens(self, agent: Agent | None = None) -> list[dict]:
        """The user's refresh tokens as the profile API lists them (newest first)."""
        agent = agent or self.user()
        return agent.ok("GET", f"/api/{PLUGIN}/token?sort=issued_at&desc").json()

    def revoke_all(self, agent: Agent | None = None) -> int:
        """What a user does to "sign out of this app": disable every refresh
        token of theirs in Glewlwyd's profile page. Returns how many."""
        agent = agent or self.user()
        count = 0
        for token in self.refresh_tokens(agent):
            if token["enabled"]:
                agent.ok("DELETE", f"/api/{PLUGIN}/token/{urllib.parse.quote(token['token_hash'], safe='')}")
                count += 1
        return count

    # --- what the provider saw ---

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=10)

    def refresh_grants(self) -> int:
        """Access tokens issued by the refresh_token grant (Glewlwyd's authorization type 6)."""
        with self.db() as db:
            return db.execute("select count(*) from gpo_access_token where gpoa_authorization_type = 6").fetchone()[0]

    def refresh_token_thumbprints(self) -> list[str | None]:
        """The DPoP key thumbprint (jkt) Glewlwyd keeps with each refresh token, newest first."""
        with self.db() as db:
            return [row[0] for row in db.execute(
                "select gpor_dpop_jkt from gpo_refresh_token order by gpor_id desc")]

    def token_request(self, client_id: str = CLIENT_ID, secret: str | None = CLIENT_SECRET,
                      dpop: str | None = None, **fields: str) -> Reply:
        """`dpop`: a DPoP proof to send with the request."""
        headers = {"DPoP": dpop} if dpop else {}
        if secret is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()
        else:
            fields["client_id"] = client_id
        return Agent(self.base).request("POST", self.token_url, form=fields, headers=headers)


def pkce_pair() -> tuple[str, str]:
    verifier = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def client_fields(provider: Glewlwyd, client_id: str) -> dict:
    """How each registered client authenticates at the token endpoint."""
    if client_id == KEY_CLIENT_ID:
        return {"client_id": client_id, "secret": None, **client_assertion(provider, client_id)}
    if client_id == PUBLIC_CLIENT_ID:
        return {"client_id": client_id, "secret": None}
    return {"client_id": client_id, "secret": CLIENT_SECRET}


def code_grant(provider: Glewlwyd, client_id: str = CLIENT_ID) -> dict:
    """A first grant without tokend: authorization code with PKCE, as any app would."""
    verifier, challenge = pkce_pair()
    redirect = "http://127.0.0.1/callback"
    url = f"{provider.issuer}/auth?" + urllib.parse.urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect, "scope": SCOPE,
        "state": "s", "nonce": "n", "code_challenge": challenge, "code_challenge_method": "S256"})
    location = provider.authorize(url)
    code = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)["code"][0]
    reply = provider.token_request(grant_type="authorization_code", code=code, redirect_uri=redirect,
                                   code_verifier=verifier, **client_fields(provider, client_id))
    assert reply.status == 200, (reply.status, reply.body)
    return reply.json()


def client_assertion(provider: Glewlwyd, client_id: str = KEY_CLIENT_ID) -> dict:
    """The form fields of a private_key_jwt client authentication (RFC 7523 §2.2),
    signed ES256 with `provider.client_key_path`."""
    import uuid

    from jwcrypto import jwk, jwt  # django-oauth-toolkit's dependency

    with open(provider.client_key_path, "rb") as f:
        key = jwk.JWK.from_pem(f.read())
    now = int(time.time())
    token = jwt.JWT(header={"alg": "ES256", "typ": "JWT"},
                    claims={"iss": client_id, "sub": client_id, "aud": provider.token_url, "jti": str(uuid.uuid4()),
                            "iat": now, "exp": now + 60})
    token.make_signed_token(key)
    return {"client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": token.serialize()}
