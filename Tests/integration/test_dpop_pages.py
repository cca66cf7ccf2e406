"""DPoP proofs for pages (RFC 9449): a page asks tokend for a proof through
the browser bridge (headless Chromium and Firefox ESR, the extension,
tokend-native-host) or through a web view's relay (tokend-webview under
Xvfb), and opens Glewlwyd's userinfo endpoint with it. Glewlwyd runs with DPoP on and nonces mandatory
(provider2.Glewlwyd(dpop=True)); the session's one resource, and its one
web-resource, is that userinfo endpoint, so pages get proofs for it and for
no other URL.

The page is served by Glewlwyd itself (its static_files_path: the test's
copy of the web app's driven page, with tokend-page.js and tokend-fetch.js),
so the page and the API share an origin: Glewlwyd puts
Access-Control-Expose-Headers on preflight answers only, so a page on another
origin could never read the DPoP-Nonce a 401 carries (and Glewlwyd's resource
server demands one). Browsers run the test's expressions over WebDriver; the
web view's page takes them from the web app's /command, which answers it
with CORS allowed."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from browser import Browser
from firefox import Firefox
from conftest import BIN, ROOT, wait_for
from provider2 import Glewlwyd
from test_dpop import DPoPTokend, device_login
from test_provider2 import Tokend2
import webapp
from webapp import WebApp

B = "io.tokend.Broker."
EXTENSION = os.path.join(ROOT, "web", "extension")


@pytest.fixture
def provider(workdir):
    """Glewlwyd with DPoP required, also serving the page (Site) from its origin."""
    instance = Glewlwyd(os.path.join(workdir, "g2"), dpop=True)
    instance.stop()
    instance.site = os.path.join(workdir, "site")
    os.makedirs(instance.site)
    with open(instance.config, "a") as f:
        f.write(f'static_files_path="{instance.site}/"\n'
                'static_files_mime_types = ({ extension = ".html"; mime_type = "text/html"; },\n'
                '                           { extension = ".js"; mime_type = "text/javascript"; })\n')
    instance.start()
    yield instance
    instance.stop()


class CommandsWithCORS(webapp.Handler):
    """The web app's handler, its answers readable from the page on Glewlwyd's origin."""

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()


def write_site(directory, app):
    """The web app's driven page (webapp.REMOTE) and the page helpers, as files Glewlwyd serves;
    the page asks the web app (another origin) for its commands."""
    page = webapp.REMOTE.decode().replace('src="/tokend-page.js"', 'src="tokend-page.js"')
    page = page.replace("<body>", '<script src="tokend-fetch.js"></script><body>', 1)
    for path in ("/ready?", "/command?"):
        page = page.replace(f"`{path}", f"`{app.origin}{path}")
    page = page.replace('fetch("/result"', f'fetch("{app.origin}/result"')
    assert page.count(app.origin) == 3
    with open(os.path.join(directory, "page.html"), "w") as f:
        f.write(page)
    for name in ("tokend-page.js", "tokend-fetch.js"):
        shutil.copy(os.path.join(ROOT, "web", name), directory)


def claims(jwt):
    return json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))


def ath(access_token):
    return base64.urlsafe_b64encode(hashlib.sha256(access_token.encode()).digest()).rstrip(b"=").decode()


class Page:
    """A logged-in DPoP session whose web-origins is the test app and whose one
    web-resource is Glewlwyd's userinfo endpoint, and the app's page open in
    `kind`: "chromium" or "firefox" (the extension and tokend-native-host) or
    "webview" (tokend-webview)."""

    def __init__(self, kind, provider, workdir, display=None, dpop=True):
        self.kind = kind
        self.provider = provider
        self.userinfo = provider.issuer + "/userinfo"
        self.app = WebApp()
        self.app.server.RequestHandlerClass = CommandsWithCORS
        write_site(provider.site, self.app)
        self.url = provider.base + "/page.html"
        self.daemon = (DPoPTokend if dpop else Tokend2)(workdir, provider, **{
            "web-origins": [provider.base], "resources": [self.userinfo], "web-resources": [self.userinfo]}).start()
        device_login(self.daemon, provider)
        # The browser's host and the web view reach tokend through a relay that records what they ask.
        self.capture = os.path.join(workdir, "asked")
        socket = os.path.join(workdir, "spy")
        self.spy = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests", "integration", "socketspy.py"),
                                     socket, self.daemon.socket, self.capture])
        wait_for(lambda: os.path.exists(socket), 10, "the relay listening")
        self.browser = self.view = None
        if kind in ("chromium", "firefox"):
            profile, home = os.path.join(workdir, "profile"), os.path.join(workdir, "home")
            register = ["--browser", "firefox"] if kind == "firefox" else ["--user-data-dir", profile]
            run = subprocess.run([os.path.join(BIN, "tokenctl"), "browser-bridge", *register], capture_output=True,
                                 text=True, env=dict(os.environ, HOME=home))
            assert run.returncode == 0, run.stderr
            if kind == "firefox":  # it finds the host under $HOME/.mozilla
                self.browser = Firefox(extension=EXTENSION, env=dict(os.environ, HOME=home, TOKEND_SOCKET=socket),
                                       profile=profile)
            else:
                self.browser = Browser(extension=EXTENSION, env={"TOKEND_SOCKET": socket}, profile=profile)
            self.open_in_browser()
        else:
            from webview import WebView
            self.view = WebView(display, socket, self.url, os.path.join(workdir, "webview.log"),
                                os.path.join(workdir, "home"), session="g2")
        wait_for(lambda: any(path == "/ready" for path, _ in self.app.requests), 30, "the page running")
        # A web view answers pages only once tokend has named the session's origins to it.
        wait_for(lambda: self.js("tokend.getToken().then(() => true, e => e.name)") is True, 30, "the page answered")
        assert self.js("typeof tokend.getProof + ' ' + typeof tokend.fetch") == "function function"

    def open_in_browser(self):
        """Opens the page, reloading until the extension's content script answers."""
        for _ in range(60):
            self.browser.get(self.url)
            if self.browser.run("Promise.race([window.bridgeReady, new Promise(r => setTimeout(() => r(false), 500))])"):
                return
        raise AssertionError("the extension's content script never answered")

    def js(self, expression):
        """Evaluates a promise-returning expression in the page: through WebDriver in a browser, through
        the web app's commands in a web view (it has no WebDriver)."""
        return self.browser.run(expression) if self.browser else self.app.run(expression)

    def ask(self, call):
        """A page API call; a refusal comes back as {error, parameters}."""
        return self.js(f"{call}.catch(e => ({{error: e.name, parameters: e.parameters ?? null}}))")

    def asked(self):
        """The GetProof calls that reached tokend: their parameters."""
        with open(self.capture, "rb") as f:
            messages = [json.loads(m) for m in f.read().split(b"\0") if m.startswith(b"{")]
        return [m["parameters"] for m in messages if m.get("method") == B + "GetProof"]

    def close(self):
        self.spy.terminate()
        self.spy.wait(10)
        if self.browser:
            self.browser.close()
        if self.view:
            self.view.close()
        self.daemon.stop()
        self.app.stop()


@pytest.fixture(scope="module")
def display():
    from webview import Display
    instance = Display()
    yield instance
    instance.stop()


@pytest.fixture(params=["chromium", "firefox", "webview"])
def page(request, provider, workdir):
    display = request.getfixturevalue("display") if request.param == "webview" else None
    instance = Page(request.param, provider, workdir, display)
    yield instance
    instance.close()


def test_a_page_gets_a_proof_and_opens_the_providers_userinfo(page):
    answer = page.ask(f"tokend.getProof({{method: 'GET', url: {json.dumps(page.userinfo)}}})")
    assert "error" not in answer, answer
    token, proof = answer["token"], answer["proof"]
    assert token["tokenType"] == "DPoP"
    assert claims(proof)["htm"] == "GET" and claims(proof)["htu"] == page.userinfo
    assert claims(proof)["ath"] == ath(token["accessToken"])
    # The page sends the token without a proof: the provider refuses it (it is bound to the key).
    alone = page.js(f"fetch({json.dumps(page.userinfo)}, {{headers: {{Authorization: 'DPoP ' + "
                    f"{json.dumps(token['accessToken'])}}}}}).then(r => r.status)")
    assert alone == 401
    # tokend.fetch: a proof per request, and one more with the provider's nonce when it asks for one.
    refused_nonces = page.provider.logs().count("oidc_verify_dpop_proof - Invalid nonce")
    opened = page.js(f"tokend.fetch({json.dumps(page.userinfo)}).then(async r => ({{status: r.status, "
                     "body: await r.text(), nonce: r.headers.get('DPoP-Nonce')}))")
    assert opened["status"] == 200, opened
    assert json.loads(opened["body"])["email"] == "alice@example.test"
    assert page.provider.logs().count("oidc_verify_dpop_proof - Invalid nonce") == refused_nonces + 1
    # The nonce is kept for the origin: the next request goes through with the first proof.
    again = page.js(f"tokend.fetch({json.dumps(page.userinfo)}).then(r => r.status)")
    assert again == 200
    assert page.provider.logs().count("oidc_verify_dpop_proof - Invalid nonce") == refused_nonces + 1
    assert [call["url"] for call in page.asked()] == [page.userinfo] * 4  # getProof, then 2 + 1 by tokend.fetch


def test_a_page_is_refused_proofs_for_urls_outside_its_web_resources(page):
    """The rule is tokend's (GetProof, for a call marked with its page): the browser's host and the web
    view pass the page's GetProof on, and tokend refuses it, naming web-resources."""
    outside = [
        page.provider.token_url,  # the provider's token endpoint: not a web-resource
        page.userinfo + "x",  # the resource's path continued, not a segment under it
        page.userinfo + "/../token",  # a dot segment out of the resource
        page.userinfo.replace("127.0.0.1", "localhost"),  # another host
        page.userinfo.replace("127.0.0.1", "127.1"),  # the same host as a number read otherwise
    ]
    for url in outside:
        answer = page.ask(f"tokend.getProof({{method: 'GET', url: {json.dumps(url)}}})")
        assert answer.get("error") == "org.varlink.service.InvalidParameter", (url, answer)
        assert answer["parameters"]["parameter"] == "url" and "proof" not in answer and "token" not in answer
        assert "a page may have proofs only for URLs within one of session g2's web-resources" in answer["parameters"]["reason"], answer
    # Each reached tokend as the page's, and was refused there.
    asked = page.asked()
    assert [(call["url"], call.get("page")) for call in asked] == [(url, page.provider.base) for url in outside], asked
    # A resource outside web-resources the host and the web view still refuse themselves (a token rule).
    elsewhere = page.ask(f"tokend.getProof({{method: 'GET', url: {json.dumps(page.userinfo)}, "
                         "resource: 'https://elsewhere.example.test/'})")
    assert elsewhere["parameters"]["resource"] == "https://elsewhere.example.test/", elsewhere
    assert len(page.asked()) == len(outside)
    # The same page still gets proofs for its web-resource (the refusals were the URLs', not the page's).
    allowed = page.ask(f"tokend.getProof({{method: 'GET', url: {json.dumps(page.userinfo + '?schema=openid')}}})")
    assert claims(allowed["proof"])["htu"] == page.userinfo
    # That one reached tokend too, marked as the page's (tokend applies the page rules to it).
    assert page.asked()[len(outside):] == [{"session": "g2", "method": "GET", "url": page.userinfo + "?schema=openid",
                                            "page": page.provider.base}]


def test_a_page_of_a_bearer_session_fetches_with_its_token_alone(provider, workdir):
    """tokend.fetch on a session without dpop (Glewlwyd's ordinary client): no proof, Bearer."""
    page = Page("chromium", provider, workdir, dpop=False)
    try:
        refused = page.ask(f"tokend.getProof({{method: 'GET', url: {json.dumps(page.userinfo)}}})")
        assert refused["error"] == B + "ProofNotAvailable", refused
        opened = page.js(f"tokend.fetch({json.dumps(page.userinfo)}).then(async r => ({{status: r.status, "
                         "body: await r.text()}))")
        assert opened["status"] == 200, opened
        assert json.loads(opened["body"])["email"] == "alice@example.test"
        token = page.daemon.token()
        assert token["tokenType"].lower() == "bearer"
        assert page.provider.logs().count("oidc_verify_dpop_proof") == 0
    finally:
        page.close()
