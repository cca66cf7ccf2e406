"""GetProof signs by an allow-list (issue 49, finding 3): URLs within the
session's resources or proof-targets (tokend.toml), and its provider's
userinfo endpoint; never the provider's own endpoints, RFC 8705 mTLS aliases
included, even when listed. Hosts are compared as written, never read: every
other spelling of an allowed host (an alias, a number in another form, an
IPv4 address inside IPv6, a %-escape) is refused. Against Glewlwyd with DPoP
(provider2.Glewlwyd(dpop=True)) and resource servers that check each proof
whole (test_dpop_proxy.ResourceServer)."""
import base64
import os
import subprocess
import sys
import urllib.parse

import pytest

from conftest import BIN
from provider2 import ADMIN_PASSWORD, CLIENT_SECRET, DPOP_CLIENT_ID, PLUGIN, Agent, Glewlwyd
from test_dpop import device_login, get_proof, make_daemon, provider  # noqa: F401 (fixtures)
from test_dpop_getproof import refused_as_the_providers, spellings
from test_dpop_proxy import proxies, resource_server, through  # noqa: F401 (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 127.0.0.1 as resolvers and URL parsers also read it. The last one no resolver takes; a WHATWG URL
# parser (browsers, Node's fetch) decodes it to 127.0.0.1.
SPELLINGS = ["localhost", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]", "127.0.0.%31"]


def refused_url(reply):
    return reply.get("error") == "org.varlink.service.InvalidParameter" and reply["parameters"]["parameter"] == "url"


def targets(*urls):
    return "proof-targets = [" + ", ".join(f'"{url}"' for url in urls) + "]"


def opens(daemon, url):
    """A request to `url` with a proof from GetProof (again with the server's nonce when it asks for one):
    the resource server's status and answer (it checks every claim of the proof, and the key)."""
    def sent(reply):
        assert "error" not in reply, (url, reply)
        headers = {"Authorization": "DPoP " + reply["parameters"]["token"]["accessToken"], "DPoP": reply["parameters"]["proof"]}
        return Agent(url).request("GET", url, headers=headers)

    answer = sent(get_proof(daemon, method="GET", url=url))
    if answer.status == 401 and answer.headers.get("DPoP-Nonce"):
        answer = sent(get_proof(daemon, method="GET", url=url, nonce=answer.headers["DPoP-Nonce"]))
    return answer.status, answer.json()


def test_get_proof_refuses_every_other_spelling_of_the_providers_host(provider, make_daemon):
    """The provider's whole origin is listed in proof-targets, so the only thing between a caller and a
    proof for the token endpoint under another name is how the host is written."""
    daemon = make_daemon(provider, session_lines=[targets(provider.base + "/")]).start()
    device_login(daemon, provider)
    port = urllib.parse.urlsplit(provider.base).port
    token_path = urllib.parse.urlsplit(provider.token_url).path
    # Each spelling a resolver takes names the provider: its discovery document answers there.
    for host in SPELLINGS[:-1]:
        document = Agent(f"http://{host}:{port}").request("GET", f"/api/{PLUGIN}/.well-known/openid-configuration")
        assert document.status == 200 and document.json()["issuer"] == provider.issuer, host
    grants = provider.refresh_grants()
    reasons = {}
    for host in SPELLINGS:
        for nonce in (None, "n-1"):
            reply = get_proof(daemon, method="POST", url=f"http://{host}:{port}{token_path}",
                              **({"nonce": nonce} if nonce else {}))
            assert refused_url(reply) and "proof" not in reply["parameters"], (host, reply)
            reasons[host] = reply["parameters"]["reason"]
    # Refused for how the host is written, not compared: a number, an IPv4 inside IPv6, an escape;
    # localhost is a plain name, which the list does not name.
    for host in ("127.1", "2130706433", "0x7f000001", "0177.0.0.1"):
        assert "is a number not written as an IPv4 address" in reasons[host], reasons[host]
    assert "carries the IPv4 address 127.0.0.1" in reasons["[::ffff:127.0.0.1]"]
    assert "contains %" in reasons["127.0.0.%31"]
    assert "not within session g2's resources or proof-targets" in reasons["localhost"], reasons["localhost"]
    assert "proof-targets in [sessions.g2]" in reasons["localhost"]
    # Written as listed, the token endpoint is the provider's; what else is under the origin gets proofs.
    assert refused_as_the_providers(get_proof(daemon, method="POST", url=provider.token_url))
    reply = get_proof(daemon, method="GET", url=provider.base + f"/api/{PLUGIN}/jwks")
    assert "error" not in reply, reply
    assert provider.refresh_grants() == grants


@pytest.fixture
def mtls_provider(workdir):
    """Glewlwyd with DPoP, whose discovery document lists mTLS endpoint aliases (RFC 8705 §5):
    client certificates from a header, and `client-cert-use-endpoint-aliases`."""
    instance = Glewlwyd(os.path.join(workdir, "g2"), dpop=True)
    admin = Agent(instance.base)
    admin.ok("POST", "/api/auth/", {"username": "admin", "password": ADMIN_PASSWORD})
    plugin = admin.ok("GET", f"/api/mod/plugin/{PLUGIN}").json()
    plugin["parameters"].update({"client-cert-source": "header", "client-cert-header-name": "X-Client-Cert",
                                 "client-cert-use-endpoint-aliases": True})
    admin.ok("PUT", f"/api/mod/plugin/{PLUGIN}", plugin)
    for action in ("disable", "enable"):  # the plugin reads its parameters when enabled
        admin.ok("PUT", f"/api/mod/plugin/{PLUGIN}/{action}")
    yield instance
    instance.stop()


def test_get_proof_refuses_the_providers_mtls_aliases_even_when_listed(mtls_provider, make_daemon):
    provider = mtls_provider
    discovered = Agent(provider.base).request("GET", provider.issuer + "/.well-known/openid-configuration").json()
    aliases = discovered.get("mtls_endpoint_aliases") or {}
    assert {"token_endpoint", "revocation_endpoint", "pushed_authorization_request_endpoint"} <= set(aliases), aliases
    assert aliases["token_endpoint"] != discovered["token_endpoint"]
    # The alias is a token endpoint: it answers a grant as the token endpoint does (400 for this unknown
    # refresh token), where a path it does not serve is not found.
    alias = urllib.parse.urlsplit(aliases["token_endpoint"]).path
    form = {"grant_type": "refresh_token", "refresh_token": "x"}
    auth = {"Authorization": "Basic " + base64.b64encode(f"{DPOP_CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()}
    as_token = Agent(provider.base).request("POST", provider.token_url, form=form, headers=auth)
    served = Agent(provider.base).request("POST", alias, form=form, headers=auth)
    assert (served.status, served.body) == (as_token.status, as_token.body) == (400, b""), (served.status, served.body)
    assert Agent(provider.base).request("POST", alias + "-not-served", form=form, headers=auth).status == 404
    # The whole origin is listed: the aliases are refused all the same, in every spelling of their paths.
    daemon = make_daemon(provider, session_lines=[targets(provider.base + "/")]).start()
    device_login(daemon, provider)
    grants = provider.refresh_grants()
    for name, url in aliases.items():
        for spelling in spellings(url):
            reply = get_proof(daemon, method="POST", url=spelling)
            assert refused_as_the_providers(reply), (name, spelling, reply)
    # Beside them, under the same listed origin, a URL that is no endpoint gets its proof.
    assert "error" not in get_proof(daemon, method="POST", url=aliases["token_endpoint"] + "-not-served")
    assert provider.refresh_grants() == grants


def test_proofs_within_resources_proof_targets_and_userinfo_open_them(provider, make_daemon, resource_server):
    api, other = resource_server(), resource_server()
    daemon = make_daemon(provider, resources=[api.url + "/api"], session_lines=[targets(other.url + "/v1/")]).start()
    device_login(daemon, provider)
    api.thumbprint = other.thumbprint = daemon.dpop()["thumbprint"]
    for server, url in ((api, api.url + "/api"), (api, api.url + "/api/data"), (other, other.url + "/v1/x/y")):
        status, answer = opens(daemon, url)
        assert status == 200 and answer["htu"] == url, (url, status, answer, server.refusals)
    assert "error" not in get_proof(daemon, method="GET", url=provider.issuer + "/userinfo")
    # Beside them: not within any, so refused, and the reason names the key that would allow it.
    for url in (api.url + "/apix", api.url + "/", other.url + "/v1", other.url + "/v2/x", provider.issuer + "/userinfo/x",
                api.url.replace("127.0.0.1", "localhost") + "/api"):
        reply = get_proof(daemon, method="GET", url=url)
        assert refused_url(reply), (url, reply)
        assert "add it, or a URL it is under, to proof-targets in [sessions.g2] of tokend.toml" in reply["parameters"]["reason"]
    # A path a server may resolve out of the list is refused for it.
    reply = get_proof(daemon, method="GET", url=other.url + "/v1/../admin")
    assert refused_url(reply) and ". or .. segment" in reply["parameters"]["reason"], reply


def test_an_unusable_proof_target_allows_nothing_and_is_named(provider, make_daemon):
    daemon = make_daemon(provider, session_lines=[targets("http://127.1:8081/")]).start()
    device_login(daemon, provider)
    for url in ("http://127.1:8081/x", "http://127.0.0.1:8081/x"):
        reply = get_proof(daemon, method="GET", url=url)
        assert refused_url(reply), (url, reply)
    assert "http://127.1:8081/ allows nothing: the host 127.1 is a number" in reply["parameters"]["reason"], reply


def test_clients_refused_a_target_say_which_key_allows_it(provider, make_daemon, resource_server, proxies):
    rs = resource_server()
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    rs.thumbprint = daemon.dpop()["thumbprint"]
    url = rs.url + "/data"
    env = {**os.environ, "TOKEND_SOCKET": daemon.socket}
    shown = subprocess.run([os.path.join(BIN, "tokenctl"), "proof", "--session", "g2", "--method", "GET", "--url", url],
                           capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode != 0 and shown.stdout == "", shown
    assert "proof-targets" in shown.stderr and "[sessions.g2]" in shown.stderr, shown.stderr
    # The Python client's DPoP auth (requests; httpx shares its error) raises tokend's refusal with its reason.
    script = ("import sys, requests\nfrom tokend_client import InvalidParameter, Tokend, requests_auth\n"
              "try:\n    requests.get(sys.argv[2], auth=requests_auth.TokendAuth(Tokend(sys.argv[1]), session='g2'), timeout=10)\n"
              "except InvalidParameter as error:\n    print(error.parameter, error)\n    sys.exit(3)\n")
    python = subprocess.run([sys.executable, "-c", script, daemon.socket, url], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "clients", "python")})
    assert python.returncode == 3 and python.stdout.startswith("url ") and "proof-targets in [sessions.g2]" in python.stdout, python
    proxy = proxies(daemon, rs.url)
    status, body = through(proxy, "GET", "/data")
    assert status == 400 and "proof-targets" in body and "[sessions.g2]" in body, (status, body)
    assert rs.requests() == [], "nothing went upstream without a proof"


def test_doctor_checks_the_proxys_upstream_against_the_sessions_targets(provider, make_daemon, resource_server, workdir):
    """tokend-proxy's user unit takes UPSTREAM and SESSION from $XDG_CONFIG_HOME/tokend/proxy.env;
    doctor asks tokend (GetProof) whether it signs for that upstream."""
    listed, unlisted = resource_server(), resource_server()
    daemon = make_daemon(provider, session_lines=[targets(listed.url + "/api/")]).start()
    device_login(daemon, provider)
    config_home = os.path.join(workdir, "config-home")
    os.makedirs(os.path.join(config_home, "tokend"))

    def doctor(upstream):
        with open(os.path.join(config_home, "tokend", "proxy.env"), "w") as f:
            f.write(f"UPSTREAM={upstream}\nSESSION=g2\n")
        run = subprocess.run([os.path.join(BIN, "tokenctl"), "doctor", "--config", daemon.config, "--session", "g2"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "TOKEND_SOCKET": daemon.socket, "XDG_CONFIG_HOME": config_home})
        return [line for line in run.stdout.splitlines() if "proxy upstream (g2)" in line], run.stdout

    lines, out = doctor(unlisted.url)
    assert len(lines) == 1 and lines[0].startswith("FAIL"), out
    assert f'add "{unlisted.url}" to proof-targets in [sessions.g2]' in out, out
    lines, out = doctor(listed.url + "/api")
    assert len(lines) == 1 and lines[0].startswith("ok") and listed.url + "/api" in lines[0], out
