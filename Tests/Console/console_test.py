"""The web console in a real browser (docs/console.md).

Headless Chromium from Debian's packages, driven by Selenium through
chromedriver, against a real `courier serve` on free ports and the demo device
run by `courier device run`. Each test saves a screenshot; the last one checks
from the browser's network log that it asked no host but Courier's.

    python Tests/Console/console_test.py --courier PATH [--screenshots DIR]
"""

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

OPTIONS = argparse.Namespace(courier=None, screenshots=None)
XSS_PAYLOAD = '{"aps":{"alert":"<script>window.__xss=1</script><img src=x onerror=\\"window.__xss=2\\"><b>bold</b>"}}'


def wait_for(predicate, timeout=20, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


class Courier:
    """A real server on free ports with its demo device connected."""

    def __init__(self, courier):
        self.directory = tempfile.mkdtemp(prefix="courier-console-")
        self.data = os.path.join(self.directory, "data")
        ports = {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}
        config = os.path.join(self.directory, "config.json")
        with open(config, "w") as file:
            json.dump({"network": {"adminPort": 0, "production": ports, "sandbox": ports}, "logLevel": "warning"}, file)
        self.log = open(os.path.join(self.directory, "serve.log"), "w+")
        self.server = subprocess.Popen([courier, "serve", "--data", self.data, "--config", config], stdout=self.log, stderr=subprocess.STDOUT)
        banner = wait_for(lambda: self._banner(), timeout=120, what="courier serve to start")
        match = re.search(r"^Admin API: (http://\S+)", banner, re.M)
        self.url = match.group(1)
        with open(os.path.join(self.data, "admin-token")) as file:
            self.token = file.read().strip()
        self.status = self.api("GET", "/v1/status")
        self.http2_port = self.status["listeners"]["http2.production"]
        self.device_out = open(os.path.join(self.directory, "device.log"), "w+")
        self.device = subprocess.Popen(
            [courier, "device", "run", "--identity", os.path.join(self.data, "demo", "device"), "--app", "com.example.demo",
             "--port", str(self.status["listeners"]["device.production"])],
            stdout=self.device_out, stderr=subprocess.STDOUT)
        self.demo_token = wait_for(self._demo_token, what="the demo device's token")
        wait_for(lambda: self.api("GET", "/v1/status")["devicesOnline"] == 1, what="the demo device online")

    def _banner(self):
        if self.server.poll() is not None:
            self.log.seek(0)
            raise RuntimeError("courier serve stopped:\n" + self.log.read())
        self.log.seek(0)
        text = self.log.read()
        return text if "Courier is running" in text else None

    def _demo_token(self):
        self.device_out.seek(0)
        match = re.search(r"^token ([0-9a-f]+)$", self.device_out.read(), re.M)
        return match and match.group(1)

    def api(self, method, path, body=None, headers=None):
        request = urllib.request.Request(self.url + path, method=method, data=None if body is None else json.dumps(body).encode())
        request.add_header("Authorization", "Bearer " + self.token)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def curl_push(self, apns_id, payload):
        """A push with curl, certificate trust, as a provider would make it."""
        demo = os.path.join(self.data, "demo")
        return subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", os.path.join(self.data, "pki", "ca.pem"),
             "--cert", os.path.join(demo, "com.example.demo.pem"), "--key", os.path.join(demo, "com.example.demo-key.pem"),
             "-H", "apns-topic: com.example.demo", "-H", "apns-push-type: alert", "-H", "apns-id: " + apns_id,
             "--data-binary", payload, "-o", "/dev/null", "-w", "%{http_code}",
             "https://localhost:%d/3/device/%s" % (self.http2_port, self.demo_token)],
            capture_output=True, text=True, timeout=30)

    def stop(self):
        for process in (self.device, self.server):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.log.close()
        self.device_out.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class ConsoleTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.courier = Courier(OPTIONS.courier)
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000",
                         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--disable-default-apps", "--disable-features=OptimizationHints,MediaRouter,Translate"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        cls.downloads = os.path.join(cls.courier.directory, "downloads")
        os.makedirs(cls.downloads)
        options.add_experimental_option("prefs", {
            "download.default_directory": cls.downloads, "download.prompt_for_download": False,
            "profile.default_content_setting_values.automatic_downloads": 1})
        service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
        cls.driver = webdriver.Chrome(options=options, service=service)
        cls.requests = []

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.courier.stop()

    def tearDown(self):
        self.collect_requests()

    # MARK: helpers

    def collect_requests(self):
        for line in self.driver.get_log("performance"):
            message = json.loads(line["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                type(self).requests.append(message["params"]["request"]["url"])

    def wait(self, condition, timeout=20):
        # A condition finds its elements again at each try; one the page replaced meanwhile is tried again.
        return WebDriverWait(self.driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(condition)

    def element(self, css, timeout=20):
        return self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, css)), timeout)

    def open(self, page):
        if not self.driver.current_url.startswith(self.courier.url):
            self.driver.get(self.courier.url + "/")
        if self.driver.find_elements(By.ID, "sign-in"):
            self.sign_in()
        self.driver.execute_script("location.hash = arguments[0]", page)
        self.element("main h2")

    def sign_in(self):
        field = self.element("#sign-in input[name=token]")
        field.clear()
        field.send_keys(self.courier.token, Keys.ENTER)
        self.wait(lambda d: d.find_element(By.ID, "nav").is_displayed())

    def screenshot(self, name, height=None):
        if not OPTIONS.screenshots:
            return
        os.makedirs(OPTIONS.screenshots, exist_ok=True)
        if height:
            self.driver.set_window_size(self.driver.get_window_size()["width"], height)
        self.driver.save_screenshot(os.path.join(OPTIONS.screenshots, name + ".png"))
        if height:
            self.driver.set_window_size(self.driver.get_window_size()["width"], 1000)

    def fetch(self, path, method="GET", headers=None, body=None):
        """A request from the page's own script: what a script in the page could do."""
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: arguments[1], headers: arguments[2], body: arguments[3], credentials: 'same-origin'})"
            ".then(r => r.text().then(t => done({status: r.status, body: t})), e => done({status: 0, body: String(e)}));",
            path, method, headers or {}, body)

    def downloaded(self, pattern):
        """The path of a finished download whose name matches."""
        def find():
            for name in os.listdir(self.downloads):
                if re.fullmatch(pattern, name):
                    return os.path.join(self.downloads, name)
            return None
        return wait_for(find, what="a download named " + pattern)

    def click(self, label):
        """Clicks the button of that accessible name (found and clicked at once: the lists are redrawn when they change)."""
        self.wait(lambda d: d.execute_script(
            "const b = [...document.querySelectorAll('button')].find(b => b.getAttribute('aria-label') === arguments[0] || b.textContent === arguments[0]);"
            "if (b) setTimeout(() => b.click()); return !!b;", label))

    def labels_are_complete(self):
        unlabelled = self.driver.execute_script(
            "return [...document.querySelectorAll('main input, main select, main textarea')]"
            ".filter(e => e.type !== 'hidden' && e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.name || e.outerHTML)")
        self.assertEqual(unlabelled, [], "form controls without a label")

    @staticmethod
    def option_values(driver, name):
        """A select's option values, read in one script (the page rebuilds the options as lists change)."""
        return driver.execute_script("return [...document.querySelectorAll('select[name=' + arguments[0] + '] option')].map((o) => o.value)", name)

    def send_form(self, payload=None):
        self.open("#send")
        token = self.courier.demo_token
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "select[name=team] option[value=DEMOTEAM01]"))
        Select(self.element("select[name=team]")).select_by_value("DEMOTEAM01")
        Select(self.element("select[name=app]")).select_by_value("com.example.demo")
        # Not chosen: the environment of the devices online (the demo device's, production).
        self.wait(lambda d: any(o.get_attribute("value") == token for o in d.find_elements(By.CSS_SELECTOR, "select[name=device] option")))
        self.assertEqual(Select(self.element("select[name=environment]")).first_selected_option.get_attribute("value"), "production")
        Select(self.element("select[name=device]")).select_by_value(token)
        self.assertEqual(self.element("input[name=token]").get_attribute("value"), token)
        if payload is not None:
            area = self.element("textarea[name=payload]")
            area.clear()
            area.send_keys(payload)
        # Every answer replaces the one before: wait for the earlier one to go, so that its text is never read as
        # this push's (reading it while the page replaced it was a race: a stale element, or the earlier text).
        earlier = self.driver.find_elements(By.ID, "answer-status")
        self.element("#send-form button[type=submit]").click()
        if earlier:
            self.wait(EC.staleness_of(earlier[0]))
        status = self.element("#answer-status")
        self.wait(lambda d: not d.find_element(By.CSS_SELECTOR, "#send-form button[type=submit]").get_attribute("disabled"))
        return status.text

    # MARK: tests (run in this order)

    def test_1_a_request_without_the_session_is_refused(self):
        self.driver.get(self.courier.url + "/")
        self.element("#sign-in")
        self.assertFalse(self.driver.find_element(By.ID, "nav").is_displayed())
        for path in ("/v1/status", "/v1/inbox", "/v1/faults", "/v1/teams"):
            answer = self.fetch(path)
            self.assertEqual(answer["status"], 401, path)
            self.assertIn("admin token", json.loads(answer["body"])["error"]["message"])
        answer = self.fetch("/v1/push", "POST", {"Content-Type": "application/json"}, "{}")
        self.assertEqual(answer["status"], 401)
        # From outside the browser, too.
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(self.courier.url + "/v1/status", timeout=10)
        self.assertEqual(refused.exception.code, 401)
        # A wrong token does not sign in.
        field = self.element("#sign-in input[name=token]")
        field.send_keys("0" * 64, Keys.ENTER)
        self.wait(lambda d: "refused" in d.find_element(By.CSS_SELECTOR, "#sign-in [role=alert]").text)
        self.screenshot("sign-in")

    def test_2_sign_in_with_the_keyboard_and_see_the_overview(self):
        self.driver.get(self.courier.url + "/")
        self.sign_in()
        self.element("canvas")
        # The charts are drawn at once (axes, time axis, "collecting…"), before the first second's values.
        drawn = self.driver.execute_script(
            "const c = document.querySelector('canvas'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n;")
        self.assertGreater(drawn, 100, "the chart is not empty when the page opens")
        # Listeners with their ports, and the demo device online.
        self.wait(lambda d: str(self.courier.http2_port) in d.find_element(By.TAG_NAME, "main").text)
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".figure .value")[2].text == "1")
        cookies = {c["name"]: c for c in self.driver.get_cookies()}
        session = cookies["courier_session"]
        self.assertTrue(session["httpOnly"])
        self.assertEqual(session["sameSite"], "Strict")
        self.assertEqual(self.driver.execute_script("return document.cookie"), "", "the session cookie is out of the script's reach")
        # The pages by keyboard: Tab to the Faults link, Enter.
        body = self.driver.find_element(By.TAG_NAME, "body")
        body.click()
        for _ in range(12):
            webdriver.ActionChains(self.driver).send_keys(Keys.TAB).perform()
            if self.driver.execute_script("return document.activeElement.textContent") == "Faults":
                break
        self.driver.switch_to.active_element.send_keys(Keys.ENTER)
        self.wait(lambda d: d.execute_script("return location.hash") == "#faults")
        self.element("#fault-form")
        self.screenshot("signed-in")

    def test_3_send_a_push_to_the_demo_device_and_watch_it_delivered(self):
        answer = self.send_form()
        self.assertTrue(answer.startswith("200"), answer)
        self.labels_are_complete()
        self.assertIn(self.courier.demo_token, self.element("#curl-command").text)
        self.assertIn("courier push", self.element("#courier-command").text)
        self.assertIn("--http2", self.element("#curl-command").text)
        self.screenshot("send", height=1500)
        apns_id = self.element("#answer-link").text
        self.element("#answer-link").click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "li.event-delivered"))
        self.assertIn(apns_id, self.element("#lookup-result").text)
        self.assertIn(" UTC", self.element("#lookup-result").text, "times say their zone")
        # The topic breaks after its dots, not inside a word (its cell's lines are whole parts of it).
        topic_lines = self.element("#lookup-result td.words").text.split("\n")
        self.assertEqual("".join(topic_lines), "com.example.demo")
        self.assertTrue(all(part in ("com.", "example.", "demo", "com.example.", "example.demo", "com.example.demo") for part in topic_lines), topic_lines)
        # Each step after the first says how long it took, and from the second on how long since the first.
        delivered = self.element("li.event-delivered").text
        self.assertRegex(delivered, r"\+\d+(\.\d)? (ms|s)", delivered)
        # The timeline is one app's, and says whose.
        self.assertIn("of com.example.demo", self.element("#lookup-result h3").text)
        self.screenshot("timeline")
        # Asked for another app's notification under this apns-id (the App field): there is none.
        self.element("input[name=app]").send_keys("com.example.other")
        self.element("input[name=app]").submit()
        self.wait(lambda d: "of com.example.other in the inbox or the delivery log" in d.find_element(By.ID, "lookup-result").text)
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "li.event-delivered"), [])
        # The device printed it.
        wait_for(lambda: (self.courier.device_out.seek(0), "From the Courier console" in self.courier.device_out.read())[1], what="the device's line")

    def test_4_a_fault_refuses_the_next_push_with_its_reason(self):
        self.open("#faults")
        self.labels_are_complete()
        self.element("input[name=match-token]").send_keys(self.courier.demo_token)
        Select(self.element("select[name=action]")).select_by_value("reject")
        self.element("input[name=reason]").send_keys("BadDeviceToken")
        self.element("input[name=count]").send_keys("1")
        self.element("#fault-form button[type=submit]").click()
        self.wait(lambda d: "BadDeviceToken" in d.find_element(By.ID, "fault-list").text)
        self.screenshot("faults")
        answer = self.send_form()
        self.assertTrue(answer.startswith("400 BadDeviceToken (fault rule f"), answer)
        self.screenshot("send-refused")
        # The rule had a count of one: the next goes through.
        self.assertTrue(self.send_form().startswith("200"))
        # A rule without a count stays until it is removed from the list.
        self.open("#faults")
        self.element("input[name=match-topic]").send_keys("com.example.none")
        self.element("input[name=reason]").send_keys("TopicDisallowed")
        self.element("#fault-form button[type=submit]").click()
        rule = self.wait(lambda d: re.search(r"\b(f\d+)\b.*com\.example\.none", d.find_element(By.ID, "fault-list").text)).group(1)
        self.click("Remove rule " + rule)
        self.wait(lambda d: "com.example.none" not in d.find_element(By.ID, "fault-list").text)
        self.assertNotIn(rule, json.dumps(self.courier.api("GET", "/v1/faults")))

    def test_5_a_push_made_with_curl_appears_in_the_live_tail(self):
        self.open("#inbox")
        self.labels_are_complete()
        self.wait(lambda d: "Live" in d.find_element(By.ID, "tail-state").text)
        apns_id = str(uuid.uuid4())
        result = self.courier.curl_push(apns_id, '{"aps":{"alert":"Hello from curl"}}')
        self.assertEqual(result.stdout, "200", result.stderr)
        self.wait(lambda d: apns_id in d.find_element(By.ID, "tail").text)
        row = self.driver.find_element(By.ID, "tail").find_elements(By.TAG_NAME, "tr")[0]
        self.assertIn(apns_id, row.text)
        self.assertIn("Hello from curl", row.text)
        self.screenshot("inbox")
        # What each entry was: broadcasts alone show none of these notifications; notifications show it again.
        Select(self.element("select[name=kind]")).select_by_value("broadcast")
        self.click("Apply")
        self.wait(lambda d: "kind=broadcast" in d.execute_script("return location.hash") and apns_id not in d.find_element(By.ID, "tail").text)
        Select(self.element("select[name=kind]")).select_by_value("notification")
        self.click("Apply")
        self.wait(lambda d: apns_id in d.find_element(By.ID, "tail").text)

    def test_6_a_payload_with_script_and_html_shows_as_text_everywhere(self):
        self.open("#inbox")
        self.wait(lambda d: "Live" in d.find_element(By.ID, "tail-state").text)
        apns_id = str(uuid.uuid4())
        self.assertEqual(self.courier.curl_push(apns_id, XSS_PAYLOAD).stdout, "200")
        self.wait(lambda d: apns_id in d.find_element(By.ID, "tail").text)
        # As the payload's JSON text has it (the quotes escaped).
        markup = '<script>window.__xss=1</script><img src=x onerror=\\"window.__xss=2\\"><b>bold</b>'

        def shown_as_text(container):
            self.assertIn(markup, self.driver.find_element(By.CSS_SELECTOR, container).text)
            self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, container + " img, " + container + " script, " + container + " b"), [])
            self.assertIsNone(self.driver.execute_script("return window.__xss"))

        shown_as_text("#tail")
        self.open("#lookup?id=" + apns_id)
        self.wait(lambda d: apns_id in d.find_element(By.ID, "lookup-result").text)
        shown_as_text("#lookup-result")
        self.screenshot("payload-as-text")
        self.open("#lookup?token=" + self.courier.demo_token)
        self.wait(lambda d: apns_id in d.find_element(By.ID, "lookup-result").text)
        shown_as_text("#lookup-result")
        # Sent from the console's own form as well.
        self.assertTrue(self.send_form(XSS_PAYLOAD).startswith("200"))
        self.element("#answer-link").click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#lookup-result td.payload"))
        shown_as_text("#lookup-result")
        self.assertEqual(self.driver.execute_script("return document.scripts.length"), 1, "only console.js runs")

    def test_7_provisioning_and_the_changes_need_the_anti_forgery_token(self):
        self.open("#provisioning")
        self.labels_are_complete()
        self.wait(lambda d: "DEMOTEAM01" in d.find_element(By.ID, "teams").text)
        self.wait(lambda d: "provider" in d.find_element(By.ID, "certificates").text)
        self.element("input[name=team-id]").send_keys("CONSOLE001")
        self.element("input[name=team-name]").send_keys("Made in the console")
        self.element("input[name=team-id]").find_element(By.XPATH, "ancestor::form").submit()
        self.wait(lambda d: "CONSOLE001" in d.find_element(By.ID, "teams").text)
        # The new team is in the app form's pick list; an app made with it is in the certificate form's.
        self.wait(lambda d: "CONSOLE001" in self.option_values(d, "app-team"))
        Select(self.element("select[name=app-team]")).select_by_value("CONSOLE001")
        self.element("input[name=bundle-id]").send_keys("com.example.console")
        self.element("input[name=bundle-id]").find_element(By.XPATH, "ancestor::form").submit()
        self.wait(lambda d: "com.example.console" in self.option_values(d, "cert-app"))
        self.assertIn("com.example.console", json.dumps(self.courier.api("GET", "/v1/teams")))
        # The key the console made for its test pushes (tests 3 to 6) is named as such.
        self.wait(lambda d: "(the console's, for Send)" in d.find_element(By.ID, "teams").text)
        self.assertNotIn("error", self.element("#status").get_attribute("class") or "", "a success is not styled as an error")
        self.screenshot("provisioning", height=1600)
        # The same team again: the API's refusal is shown as an error, which stays until dismissed.
        self.element("input[name=team-id]").send_keys("CONSOLE001")
        self.element("input[name=team-name]").send_keys("Again")
        self.element("input[name=team-id]").find_element(By.XPATH, "ancestor::form").submit()
        self.wait(lambda d: "error" in (d.find_element(By.ID, "status").get_attribute("class") or ""))
        self.assertEqual(self.element("#status").get_attribute("role"), "alert")
        self.assertIn("CONSOLE001", self.element("#status").text)
        self.assertIn("exists", self.element("#status").text, "the same id again: the API's 409, the form emptied after the first")
        self.element("#status button.dismiss").click()
        self.wait(lambda d: d.find_element(By.ID, "status").text == "")

        # A new auth key: its .p8 downloaded once, a P-256 key; then revoked from the list.
        before = {k["keyID"] for t in self.courier.api("GET", "/v1/teams")["teams"] for k in t["authKeys"]}
        self.click("New auth key for DEMOTEAM01")
        p8 = self.downloaded(r"AuthKey_[A-Z0-9]{10}\.p8")
        key_id = re.search(r"AuthKey_([A-Z0-9]{10})", p8).group(1)
        self.assertNotIn(key_id, before)
        checked = subprocess.run(["openssl", "pkey", "-in", p8, "-noout", "-text"], capture_output=True, text=True)
        self.assertEqual(checked.returncode, 0, checked.stderr)
        self.assertIn("prime256v1", checked.stdout)
        self.click("Revoke key " + key_id)
        self.wait(EC.alert_is_present()).accept()
        self.wait(lambda d: any(k["keyID"] == key_id and k.get("revokedAt") for t in self.courier.api("GET", "/v1/teams")["teams"] for k in t["authKeys"]))

        # A provider certificate issued and downloaded with its key: curl pushes with them.
        Select(self.element("select[name=cert-app]")).select_by_value("com.example.demo")
        Select(self.element("select[name=cert-environments]")).select_by_value("production")
        self.element("select[name=cert-app]").find_element(By.XPATH, "ancestor::form").submit()
        certificate = self.downloaded(r"com\.example\.demo\.pem")
        key = self.downloaded(r"com\.example\.demo-key\.pem")
        wait_for(lambda: os.path.getsize(key) > 0, what="the key's download")
        pushed = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", os.path.join(self.courier.data, "pki", "ca.pem"), "--cert", certificate, "--key", key,
             "-H", "apns-topic: com.example.demo", "--data-binary", '{"aps":{"alert":"with the downloaded certificate"}}',
             "-o", "/dev/null", "-w", "%{http_code}", "https://localhost:%d/3/device/%s" % (self.courier.http2_port, self.courier.demo_token)],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(pushed.stdout, "200", pushed.stderr)
        serial = subprocess.run(["openssl", "x509", "-in", certificate, "-noout", "-serial"], capture_output=True, text=True).stdout.strip().split("=")[1].lower()
        # The listed certificate downloads as the same PEM; revoking it ends its handshakes.
        self.wait(lambda d: serial in d.find_element(By.ID, "certificates").text.lower())
        os.rename(certificate, certificate + ".issued")
        self.click("Download certificate " + serial)
        listed = self.downloaded(serial + r"\.pem")
        with open(listed) as a, open(certificate + ".issued") as b:
            self.assertEqual(a.read().strip(), b.read().strip())
        self.click("Revoke certificate " + serial)
        self.wait(EC.alert_is_present()).accept()
        self.wait(lambda d: any(c["serial"].lower() == serial and c.get("revokedAt") for c in self.courier.api("GET", "/v1/certificates")["certificates"]))

        # A device activated: its identity folder as a tar archive, which courier device run takes.
        self.click("Activate a device (download its identity folder)")
        archive = self.downloaded(r"device-[0-9a-f]+\.tar")
        folder = os.path.join(self.courier.directory, "unpacked")
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        identity = os.path.join(folder, os.path.basename(archive)[:-4])
        self.assertEqual(sorted(os.listdir(identity)), ["ca.pem", "cert.pem", "identity.json", "key.pem"])
        device = subprocess.Popen(
            [OPTIONS.courier, "device", "run", "--identity", identity, "--app", "com.example.demo",
             "--port", str(self.courier.status["listeners"]["device.production"])],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # "connected" (stderr) and the token (stdout), in either order.
            lines = [device.stdout.readline() for _ in range(2)]
            self.assertTrue(any(re.fullmatch(r"token [0-9a-f]+\n", line) for line in lines), lines)
        finally:
            device.terminate()
            device.wait(timeout=20)
            device.stdout.close()
        # With the cookie but without the session's token, a change is refused.
        answer = self.fetch("/v1/teams", "POST", {"Content-Type": "application/json"}, '{"id": "CONSOLE002", "name": "x"}')
        self.assertEqual(answer["status"], 403)
        self.assertNotIn("CONSOLE002", json.dumps(self.courier.api("GET", "/v1/teams")))

    def test_7b_virtual_devices_registered_changed_and_removed(self):
        self.open("#provisioning")
        self.labels_are_complete()
        self.wait(lambda d: "com.example.demo" in self.option_values(d, "virtual-app"))
        Select(self.element("select[name=virtual-app]")).select_by_value("com.example.demo")
        Select(self.element("select[name=virtual-environment]")).select_by_value("production")
        first, second = secrets.token_hex(32), secrets.token_hex(32)
        self.element("textarea[name=virtual-tokens]").send_keys(first + "\n" + second + "\n")
        self.element("#virtual-form").submit()
        self.wait(lambda d: first in d.find_element(By.ID, "virtual-tokens").text and second in d.find_element(By.ID, "virtual-tokens").text)
        path = "/v1/apps/com.example.demo/virtual-tokens"

        def token(value):
            listed = self.courier.api("GET", path + "?environment=production")["tokens"]
            return next((t for t in listed if t["token"] == value), None)

        def push(value):
            data = os.path.join(self.courier.data, "demo")
            return subprocess.run(
                ["curl", "-sS", "--http2", "--cacert", os.path.join(self.courier.data, "pki", "ca.pem"),
                 "--cert", os.path.join(data, "com.example.demo.pem"), "--key", os.path.join(data, "com.example.demo-key.pem"),
                 "-H", "apns-topic: com.example.demo", "--data-binary", '{"aps":{"alert":"to a virtual device"}}',
                 "-o", "/dev/null", "-w", "%{http_code}", "https://localhost:%d/3/device/%s" % (self.courier.http2_port, value)],
                capture_output=True, text=True, timeout=30).stdout

        self.assertEqual(push(first), "200")
        self.click("Set offline " + first)
        self.wait(lambda d: token(first)["online"] is False)
        self.wait(lambda d: "offline" in d.find_element(By.ID, "virtual-tokens").text)
        self.click("Uninstall " + first)
        self.wait(lambda d: token(first).get("uninstalledAt"))
        self.assertEqual(push(first), "410")
        self.screenshot("virtual-devices", height=1800)
        self.click("Remove " + second)
        self.wait(lambda d: token(second) is None)
        self.wait(lambda d: second not in d.find_element(By.ID, "virtual-tokens").text)
        self.assertEqual(push(second), "400")
        # A token that is not hex: the API's one-line refusal, shown as an error.
        self.element("textarea[name=virtual-tokens]").send_keys("not-a-token")
        self.element("#virtual-form").submit()
        self.wait(lambda d: "error" in (d.find_element(By.ID, "status").get_attribute("class") or ""))
        self.assertIn("not hex", self.element("#status").text)
        self.element("#status button.dismiss").click()

    def test_8_narrow_screens_and_signing_out(self):
        # The overview while pushes come in: the live chart and the refusals of the tests before.
        self.open("#overview")
        push = {"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": self.courier.demo_token,
                "payload": '{"aps":{"alert":"load"}}'}
        for _ in range(60):
            self.assertEqual(self.courier.api("POST", "/v1/push", push)["status"], 200)
            time.sleep(0.1)
        self.wait(lambda d: "BadDeviceToken" in d.find_element(By.TAG_NAME, "main").text)
        self.screenshot("overview", height=1250)
        self.driver.set_window_size(390, 844)
        try:
            for page in ("#overview", "#send", "#inbox", "#faults", "#provisioning"):
                self.open(page)
                time.sleep(0.5)
                overflow = self.driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
                self.assertLessEqual(overflow, 0, page + " is wider than the screen")
                if page in ("#overview", "#send"):
                    self.screenshot("narrow-" + page[1:])
        finally:
            self.driver.set_window_size(1280, 1000)
        self.open("#overview")
        self.element("#sign-out").click()
        self.element("#sign-in")
        self.assertEqual(self.fetch("/v1/status")["status"], 401)
        self.assertNotIn("courier_session", {c["name"] for c in self.driver.get_cookies()})

    def test_9_the_browser_asked_no_host_but_courier(self):
        self.collect_requests()
        origin = urllib.parse.urlsplit(self.courier.url)
        hosts = set()
        for url in type(self).requests:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme in ("data", "blob"):
                continue
            hosts.add((parts.scheme, parts.netloc))
        self.assertTrue(type(self).requests, "the network log is empty")
        self.assertEqual(hosts, {(origin.scheme, origin.netloc)})
        self.assertFalse([u for u in type(self).requests if urllib.parse.urlsplit(u).path == "/x"], "the payload's <img src=x> was loaded")
        self.screenshot("signed-out")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--courier", required=True)
    parser.add_argument("--screenshots")
    OPTIONS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest, failfast=False)
