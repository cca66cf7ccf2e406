"""The user's part of a login, done as a user does it: Debian's chromium
(headless) driven through chromium-driver signs in on the test server's page
and approves (or denies) the request."""
import os
import shutil
import tempfile

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from ports import free_port

USER, PASSWORD = "alice", "alice-password"


class Browser:
    """Headless Chromium with its own profile directory. `extension`: a
    directory loaded as an unpacked extension; `env`: extra environment for
    the browser (and so for native hosts it starts); `profile`: reuse a
    profile directory (kept on close)."""

    def __init__(self, extension=None, env=None, profile=None):
        self.keep_profile = profile is not None
        self.profile = profile or tempfile.mkdtemp(prefix="tkb", dir="/tmp")
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--user-data-dir={self.profile}", "--no-first-run", "--password-store=basic"):
            options.add_argument(flag)
        if extension:
            options.add_argument(f"--load-extension={extension}")
            options.add_argument("--disable-features=DisableLoadExtensionCommandLineSwitch")
        # Selenium must not look for a driver on the network: Debian's is given.
        os.environ["SE_OFFLINE"] = "true"
        # chromedriver's port comes from the tests' table (ports.py), not Selenium's check-then-bind.
        service = Service("/usr/bin/chromedriver", port=free_port(), env=dict(os.environ, **(env or {})))
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(30)

    def get(self, url):
        self.driver.get(url)

    def run(self, expression):
        """Evaluates a promise-returning expression in the page; errors come back as {'error': name}."""
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"Promise.resolve().then(() => {expression}).then(done, e => done({{error: e.name || String(e)}}));")

    def cookies(self):
        """Every cookie in the browser: [{name, domain, value}]."""
        return [{"name": c["name"], "domain": c["domain"], "value": c["value"]}
                for c in self.driver.execute_cdp_cmd("Network.getAllCookies", {})["cookies"]]

    def close(self):
        """Stops the browser (its profile is then complete on disk); closing twice is harmless."""
        if self.driver is None:
            return
        try:
            self.driver.quit()
        finally:
            self.driver = None
            if not self.keep_profile:
                shutil.rmtree(self.profile, ignore_errors=True)

    def wait(self, condition, timeout=20):
        return WebDriverWait(self.driver, timeout).until(condition)

    def wait_until_replaced(self, element):
        """Waits until the page that held `element` has been replaced. While a
        navigation is under way chromedriver may answer a question about the old
        element with a stale-reference error or with a generic inspector error
        ("Node with given id does not belong to the document"); both mean the
        old document is gone."""
        def replaced(_driver):
            try:
                element.is_enabled()
                return False
            except WebDriverException:
                return True
        self.wait(replaced)

    def sign_in_if_asked(self):
        if self.driver.find_elements(By.ID, "id_username"):
            self.driver.find_element(By.ID, "id_username").send_keys(USER)
            self.driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
            button = self.driver.find_element(By.ID, "sign-in")
            button.click()
            self.wait_until_replaced(button)

    def decide(self, accept):
        """Clicks Accept/Deny on the device page, or Authorize/Cancel on the authorization page."""
        self.wait(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "button, input[type=submit]")))
        if accept:
            buttons = self.driver.find_elements(By.CSS_SELECTOR, "button[value=accept], input[name=allow]")
        else:
            buttons = self.driver.find_elements(By.CSS_SELECTOR, "button[value=deny], input[type=submit]:not([name=allow])")
        assert buttons, f"no approval button on {self.driver.current_url}: {self.driver.page_source[:500]}"
        buttons[0].click()

    def approve_device(self, verification_uri_complete, accept=True):
        """Opens the complete verification URI, signs in, submits the code and decides."""
        self.driver.get(verification_uri_complete)
        self.sign_in_if_asked()
        self.wait(expected_conditions.presence_of_element_located((By.ID, "id_user_code")))
        submit = self.driver.find_element(By.CSS_SELECTOR, "form button[type=submit]")
        submit.click()
        self.wait_until_replaced(submit)  # else decide() may see this page's button
        self.decide(accept)
        self.wait(lambda d: "device-grant-status" in d.current_url or "device-confirm" not in d.current_url)

    def authorize(self, authorization_url, accept=True):
        """Opens the authorization URL, signs in and decides; returns the text of
        the page the browser ends on (tokenctl's "you can close this tab")."""
        self.driver.get(authorization_url)
        self.sign_in_if_asked()
        self.decide(accept)
        self.wait(lambda d: d.current_url.startswith("http://127.0.0.1:") and "/callback" in d.current_url)
        self.wait(expected_conditions.presence_of_element_located((By.TAG_NAME, "h1")))
        return self.driver.find_element(By.TAG_NAME, "body").text
