"""GetProof makes no proof for the provider's own endpoints (token, PAR,
revocation, device authorization, introspection, authorization) in any
spelling the provider may take for them, even where proof-targets lists the
provider's origin: a refresh token captured elsewhere stays worthless to
whoever may call GetProof for the session, since only tokend signs requests
that use the grant. Resource servers the session allows (its resources,
proof-targets, the provider's userinfo) are served as before; the host
spellings and mTLS aliases are test_dpop_targets'."""
import json
import signal
import socket
import urllib.parse

from conftest import read_frame
from test_provider2 import B
from provider2 import CLIENT_SECRET, DPOP_CLIENT_ID, Agent
from test_dpop import device_login, get_proof, make_daemon, provider, userinfo  # noqa: F401 (fixtures)


def refused_as_the_providers(reply):
    return (reply.get("error") == "org.varlink.service.InvalidParameter"
            and reply["parameters"]["parameter"] == "url"
            and "provider's own endpoints" in reply["parameters"].get("reason", ""))


def spellings(url):
    """Ways of writing `url` a server takes for the same resource."""
    parts = urllib.parse.urlsplit(url)
    host, _, port = parts.netloc.partition(":")
    head, _, last = parts.path.rpartition("/")
    default = "http://" + host.upper() + (":" + port if port else "") + parts.path
    return [
        url,
        url + "/",
        f"{parts.scheme}://{host.upper()}{':' + port if port else ''}{parts.path}",
        f"{parts.scheme}://{parts.netloc}{head}/./{last}",
        f"{parts.scheme}://{parts.netloc}{head}/x/../{last}",
        f"{parts.scheme}://{parts.netloc}{head}/%{ord(last[0]):02x}{last[1:]}",
        f"{parts.scheme}://{parts.netloc}{head}/{last};jsessionid=1",
        url + "?grant_type=refresh_token",
        default,
    ]


def test_get_proof_refuses_the_token_endpoint_and_a_captured_refresh_token_stays_worthless(provider, make_daemon):
    daemon = make_daemon(provider).start()
    device_login(daemon, provider)
    captured = daemon.stored_record()["refreshToken"]
    grants = provider.refresh_grants()
    # The reviewer's attack: a proof for the token endpoint from GetProof, then the captured token with it.
    reply = get_proof(daemon, method="POST", url=provider.token_url)
    assert refused_as_the_providers(reply), reply
    answer = provider.token_request(client_id=DPOP_CLIENT_ID, secret=CLIENT_SECRET,
                                    grant_type="refresh_token", refresh_token=captured)
    assert answer.status == 403 and answer.json()["error"] == "invalid_dpop_proof", (answer.status, answer.body)
    for url in spellings(provider.token_url):
        for nonce in (None, "n-1"):
            reply = get_proof(daemon, method="POST", url=url, **({"nonce": nonce} if nonce else {}))
            assert refused_as_the_providers(reply), (url, reply)
    assert provider.refresh_grants() == grants
    # The session itself is unharmed: tokend, holding the key, refreshes with that same token.
    reply = daemon.refresh(1)
    assert "error" not in reply, (reply, daemon.logs()[-2000:])
    assert provider.refresh_grants() == grants + 1


def test_get_proof_refuses_every_endpoint_of_the_provider_and_still_opens_userinfo(provider, make_daemon):
    # The provider's whole issuer path is a proof target: its endpoints are refused all the same.
    daemon = make_daemon(provider, session_lines=[f'proof-targets = ["{provider.issuer}/"]']).start()
    device_login(daemon, provider)
    discovered = Agent(provider.base).request("GET", provider.issuer + "/.well-known/openid-configuration").json()
    names = ["token_endpoint", "pushed_authorization_request_endpoint", "revocation_endpoint",
             "device_authorization_endpoint", "introspection_endpoint", "authorization_endpoint"]
    endpoints = {name: discovered[name] for name in names if discovered.get(name)}
    # Glewlwyd lists all six; a provider that lists fewer makes this test say so rather than pass on less.
    assert set(endpoints) == set(names), sorted(endpoints)
    for name, url in endpoints.items():
        for spelling in spellings(url):
            reply = get_proof(daemon, method="POST", url=spelling)
            assert refused_as_the_providers(reply), (name, spelling, reply)
    # The provider's resource endpoint is not one of them: its proof opens it.
    url = discovered["userinfo_endpoint"]
    reply = get_proof(daemon, method="GET", url=url)
    assert "error" not in reply, reply
    answer = userinfo(provider, reply["parameters"]["token"]["accessToken"], reply["parameters"]["proof"])
    if answer.status == 401 and "use_dpop_nonce" in (answer.headers.get("WWW-Authenticate") or ""):
        reply = get_proof(daemon, method="GET", url=url, nonce=answer.headers["DPoP-Nonce"])
        assert "error" not in reply, reply
        answer = userinfo(provider, reply["parameters"]["token"]["accessToken"], reply["parameters"]["proof"])
    assert answer.status == 200, (answer.status, answer.body)
    assert json.loads(answer.body)["email"] == "alice@example.test"
    # Near misses of the token endpoint are other resources under the listed path, and get their proofs.
    for other in (provider.token_url + "x", provider.token_url + "/more"):
        assert "error" not in get_proof(daemon, method="POST", url=other), other


def test_a_caller_refused_the_token_spends_none_of_the_proof_budget(provider, make_daemon):
    """Access is checked before the rate bound: calls refused for their resource answer that refusal,
    never RateLimited, however many come at once, and leave the caller's budget whole."""
    daemon = make_daemon(provider, session_lines=['proof-targets = ["https://rs.example.test/"]']).start()
    device_login(daemon, provider)
    count = 1500  # well over the state key's burst (400) and what 200 a second refills while they are answered
    call = json.dumps({"method": B + "GetProof", "parameters": {
        "session": "g2", "resource": "https://not-a-resource.example", "method": "GET",
        "url": "https://rs.example.test/x"}}).encode() + b"\0"
    connections = [socket.socket(socket.AF_UNIX) for _ in range(6)]
    try:
        for s in connections:
            s.connect(daemon.socket)
            s.sendall(call * (count // len(connections)))
        replies = [json.loads(read_frame(s)) for s in connections for _ in range(count // len(connections))]
    finally:
        for s in connections:
            s.close()
    assert {r.get("error") for r in replies} == {B + "ResourceNotAllowed"}, {r.get("error") for r in replies}
    assert "error" not in get_proof(daemon, method="GET", url="https://rs.example.test/x")


def test_after_a_restart_with_the_provider_down_the_endpoints_are_still_known(provider, make_daemon):
    """The endpoints come from the discovery document kept in the state: a restarted tokend that cannot
    reach the provider still refuses its token endpoint and still makes proofs for resource servers."""
    daemon = make_daemon(provider, session_lines=['proof-targets = ["https://rs.example.test/"]']).start()
    device_login(daemon, provider)
    daemon.stop(signal.SIGKILL)
    provider.stop()
    daemon.start()
    assert refused_as_the_providers(get_proof(daemon, method="POST", url=provider.token_url + "/"))
    reply = get_proof(daemon, method="GET", url="https://rs.example.test/x")
    assert "error" not in reply, reply
