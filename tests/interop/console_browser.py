"""The console in a real browser: headless Chromium driven by Selenium.

Run by tests/it/console.rs against a gateway it started:
    console_browser.py --url ADMIN_URL --token TOKEN --expect JSON --screenshots DIR
                       [--chromium PATH] [--chromedriver PATH]
Logs in through the form, visits every page, checks what each shows against the values the
Rust side read from the admin API (--expect), filters the ledger, opens a task, checks the
card named like an HTML tag renders as text with no alert, the cookies are HttpOnly, no
request left the origin and no URL carries the token; a screenshot of each page in DIR.
Prints "console browser test: ok" at the end; any failure raises.
"""

import argparse
import json
import os
import sys
from urllib.parse import urlparse

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("  ok:", what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--screenshots", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = ap.parse_args()
    base = args.url.rstrip("/")
    origin = urlparse(base)
    expect = json.loads(args.expect)
    shots = args.screenshots
    os.makedirs(shots, exist_ok=True)

    opts = webdriver.ChromeOptions()
    opts.binary_location = args.chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,800", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--disable-default-apps"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(args.chromedriver), options=opts)
    driver.set_window_size(1280, 800)
    # The page itself 1280x800 (the window's frame aside), as the screenshots are taken.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    driver.set_page_load_timeout(30)
    visited = []

    def go(path):
        driver.get(base + path)
        visited.append(driver.current_url)
        no_alert()
        no_foreign_requests()

    def shot(name):
        driver.save_screenshot(os.path.join(shots, name + ".png"))

    def no_alert():
        try:
            text = driver.switch_to.alert.text
        except NoAlertPresentException:
            return
        raise AssertionError("an alert opened: %r" % text)

    def no_foreign_requests():
        entries = driver.execute_script(
            "return performance.getEntries().map(function (e) { return e.name; })")
        for name in entries + [driver.current_url]:
            u = urlparse(name)
            if u.scheme in ("http", "https"):
                if (u.hostname, u.port) != (origin.hostname, origin.port):
                    raise AssertionError("a request left the origin: %s" % name)
            if args.token in name:
                raise AssertionError("the token is in a URL: %s" % name)

    def click(element):
        """Clicks a link or button and waits for the page it leads to."""
        # A mark on the old page's window: gone once the next document is loaded.
        driver.execute_script("window.__ldpOld = true")
        element.click()
        WebDriverWait(driver, 15, ignored_exceptions=[WebDriverException]).until(
            lambda d: d.execute_script(
                "return window.__ldpOld === undefined && document.readyState === 'complete'"))
        visited.append(driver.current_url)
        no_alert()

    def text():
        return driver.find_element(By.TAG_NAME, "body").text

    try:
        # Not logged in: the fleet sends to the login form.
        go("/ui/fleet")
        check(urlparse(driver.current_url).path == "/ui/login", "unauthenticated /ui/fleet -> login")
        shot("login")
        # A wrong token first, then the right one, typed into the form.
        driver.find_element(By.ID, "token").send_keys("wrong-token")
        click(driver.find_element(By.CSS_SELECTOR, "form.login button"))
        check("Wrong token" in text(), "a wrong token is refused with a message")
        driver.find_element(By.ID, "token").send_keys(args.token)
        click(driver.find_element(By.CSS_SELECTOR, "form.login button"))
        check(urlparse(driver.current_url).path == "/ui/fleet", "logged in -> fleet")
        cookies = driver.get_cookies()
        check(any(c["name"] == "ldp_console" for c in cookies), "a session cookie is set")
        for c in cookies:
            check(c.get("httpOnly") is True, "cookie %s is HttpOnly" % c["name"])
            check(c.get("sameSite") == "Strict", "cookie %s is SameSite=Strict" % c["name"])
        check(not driver.execute_script("return document.cookie"), "no cookie readable by script")

        # Fleet.
        go("/ui/fleet")
        body = text()
        for d in expect["delegates"]:
            check(d in body, "fleet shows delegate %s" % d)
        check("healthy" in body, "fleet shows health")
        check(expect["xss"] in body, "the XSS card's name shows as text")
        check(not driver.find_elements(By.CSS_SELECTOR, "main img"), "no <img> made of the card")
        # The stylesheet applied (from the binary, under the CSP).
        bg = driver.execute_script(
            "return getComputedStyle(document.querySelector('header.top')).backgroundColor")
        check(bg not in ("", "rgba(0, 0, 0, 0)"), "the console's stylesheet is applied (%s)" % bg)
        shot("fleet")
        # A delegate's page through its link (keyboard reachable: a real link).
        click(driver.find_element(By.LINK_TEXT, "d1"))
        check(expect["xss"] in text(), "the delegate page shows the card's name as text")
        shot("delegate")

        # Explain, through its form.
        go("/ui/route")
        Select(driver.find_element(By.NAME, "skill")).select_by_value("summarize")
        click(driver.find_element(By.CSS_SELECTOR, "form.filters button"))
        body = text()
        check(expect["policy"] in body, "explain names the policy %s" % expect["policy"])
        check("in band" in body, "explain shows the band")
        check(len(driver.find_elements(By.CSS_SELECTOR, "table.explain tbody tr")) == len(expect["delegates"]),
              "explain has a row per delegate")
        shot("route")

        # Ledger, then filtered by ingress through its form.
        go("/ui/ledger")
        body = text()
        for t in expect["ledger_rows"]:
            check(t in body, "ledger lists task %s" % t)
        shot("ledger")
        Select(driver.find_element(By.NAME, "ingress")).select_by_value("openai")
        click(driver.find_element(By.CSS_SELECTOR, "form.filters button"))
        body = text()
        check(expect["openai_task"] in body, "ingress=openai shows the OpenAI task")
        for t in expect["ldp_tasks"]:
            check(t not in body, "ingress=openai hides LDP task %s" % t)
        check("ingress=openai" in driver.current_url, "the filter is in the URL")

        # A task, opened from the ledger.
        go("/ui/ledger")
        click(driver.find_element(By.LINK_TEXT, expect["task_id"]))
        body = text()
        check(expect["task_delegate"] in body, "the task page names its delegate")
        check("Cost" in body and "Trace id" in body, "the task page shows cost and trace id")
        shot("task")

        # Spend and policies.
        go("/ui/spend")
        check(driver.find_elements(By.CSS_SELECTOR, "svg"), "spend draws SVG charts")
        body = text()
        check("anonymous" in body, "spend lists the tenant")
        check("per delegate" in body and expect["task_delegate"] in body, "spend per delegate")
        shot("spend")
        go("/ui/policies")
        body = text()
        for p in expect["policies"]:
            check(p in body, "policies lists %s" % p)
        shot("policies")

        # The console's own screenshot for docs, at 1280x800.
        go("/ui/fleet")
        shot("console")

        # Logout through its button; the session is gone.
        click(driver.find_element(By.CSS_SELECTOR, "form.logout button"))
        go("/ui/fleet")
        check(urlparse(driver.current_url).path == "/ui/login", "after logout -> login")

        for u in visited:
            check(args.token not in u, "no token in %s" % u)
        # The wrong token's 401 is logged as a failed load: expected, the only one allowed.
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"
                  and "favicon" not in e.get("message", "")
                  and not ("/ui/login" in e.get("message", "") and "401" in e.get("message", ""))]
        check(not severe, "no console errors (CSP violations included): %r" % severe)
    finally:
        driver.quit()
    print("console browser test: ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAILED:", e, file=sys.stderr)
        sys.exit(1)
