"""`vtrr web` in a real browser: headless Chromium driven by Selenium (Debian's `chromium`
and `chromium-driver`, which `make deps` installs), against a real server with the module.

`VTRR_SCREENSHOTS=1` also saves the queue and tenants pages of a demo queue to
docs/img/ (the README's pictures).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from servers import REPO
from test_web import TOKEN, serving, url_of

import vtrr
from vtrr import Item
from vtrr.web import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver (make deps installs them)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    assert CHROMIUM and CHROMEDRIVER
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def until[T](probe: Callable[[], T], seconds: float = 10.0) -> T:
    """`probe()` once it is truthy; a page changed under it (a stream swap) is tried again."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if value := probe():
                return value
        except StaleElementReferenceException:
            pass
        assert time.monotonic() < deadline, "the page did not change in time"
        time.sleep(0.1)


def row_of(browser: WebDriver, tenant: str) -> str:
    rows = browser.find_elements(By.CSS_SELECTOR, f'tr[data-tenant="{url_of(tenant)}"]')
    return rows[0].text if rows else ""


def log_in(browser: WebDriver, base: str) -> None:
    browser.get(f"{base}/login")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    until(lambda: "can write" in browser.page_source)


def test_backlog_appears_pause_and_revive_from_the_page(
    browser: WebDriver, client: redis.Redis, queue: vtrr.Queue
) -> None:
    tenant = "alice & <bob>"
    queue.enqueue("carol", "c1", b"")
    q = url_of(queue.name)
    with serving(create_app(client, [queue.name], write_token=TOKEN, interval_s=0.2)) as base:
        log_in(browser, base)
        browser.get(f"{base}/queue?q={q}")
        assert row_of(browser, tenant) == ""
        # Enqueued behind the page's back: its stream shows the backlog.
        queue.enqueue_many(Item(tenant, f"a{n}", b"") for n in range(7))
        until(lambda: row_of(browser, tenant).split()[3:5] == ["7", "0"])
        assert row_of(browser, tenant).startswith("alice & <bob>")

        browser.get(f"{base}/queue/tenants?q={q}")
        assert "active" in row_of(browser, tenant)
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-tenant="{url_of(tenant)}"]')
        row.find_element(By.XPATH, ".//button[text()='pause']").click()
        until(lambda: "paused" in row_of(browser, tenant))
        assert "resume" in row_of(browser, tenant)
        assert queue.partition(tenant).paused
        assert "pause alice & <bob>: paused" in browser.find_element(By.ID, "flash").text

        # A dead letter, revived from the dead letters page.
        lease = queue.lease(10_000)
        assert lease is not None and lease.id == "c1"
        queue.nack(lease, dead=True)
        browser.get(f"{base}/queue/dead?q={q}")
        browser.find_element(By.XPATH, "//tr[@data-item='c1']//button[text()='revive']").click()
        until(lambda: not browser.find_elements(By.CSS_SELECTOR, "tr[data-item='c1']"))
        assert queue.stats().dead == 0 and queue.partition("carol").queued == 1


def test_a_rate_is_set_and_removed_from_the_tenant_page(
    browser: WebDriver, client: redis.Redis, queue: vtrr.Queue
) -> None:
    tenant = "alice & <bob>"
    queue.enqueue_many(Item(tenant, f"a{n}", b"") for n in range(5))
    q, t = url_of(queue.name), url_of(tenant)

    def shown(css: str) -> str:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    def set_rate(rate: str, per_ms: str, burst: str) -> None:
        for name, value in (("rate", rate), ("per_ms", per_ms), ("burst", burst)):
            field = browser.find_element(By.CSS_SELECTOR, f"#tenant input[aria-label='{name}']")
            field.clear()
            field.send_keys(value)
        browser.find_element(By.XPATH, "//div[@id='tenant']//button[text()='set rate']").click()

    with serving(create_app(client, [queue.name], write_token=TOKEN, interval_s=0.2)) as base:
        log_in(browser, base)
        browser.get(f"{base}/queue/tenant?q={q}&t={t}")
        assert shown("dd.rate") == "none"
        assert browser.find_elements(By.XPATH, "//button[text()='remove rate']") == []
        # Bad input: the flash says why, and nothing is written.
        set_rate("five", "1000", "")
        until(lambda: "rate must be a whole number or none" in shown("#flash"))
        set_rate("2", "", "")
        until(lambda: "a rate needs per_ms" in shown("#flash"))
        assert queue.limit(tenant).rate is None and shown("dd.rate") == "none"

        set_rate("2", "60000", "3")
        until(lambda: "rate 2/60000ms, burst 3" in shown("#flash"))
        assert queue.limit(tenant).rate == vtrr.Rate(2, 60_000, 3)
        until(lambda: shown("dd.rate") == "2/60000ms, burst 3")  # the detail refreshes
        assert shown("dd.tokens") == "3"

        # Its burst spent behind the page's back: the live queue page shows it waiting.
        assert [lease.id for lease in queue.lease_many(60_000, 5)] == ["a0", "a1", "a2"]
        browser.get(f"{base}/queue?q={q}")
        until(lambda: "2/60000ms, burst 3 0, next in" in row_of(browser, tenant))

        browser.get(f"{base}/queue/tenant?q={q}&t={t}")
        assert shown("dd.tokens") == "0" and shown("dd.next-token").startswith("in ")
        browser.find_element(By.XPATH, "//button[text()='remove rate']").click()
        until(lambda: "rate none" in shown("#flash"))
        until(lambda: shown("dd.rate") == "none")
        assert queue.limit(tenant).rate is None
        assert browser.find_elements(By.XPATH, "//button[text()='remove rate']") == []


def test_without_the_token_a_page_has_no_write_controls_and_cannot_write(
    browser: WebDriver, client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue_many([Item("alice", "a1", b""), Item("bob", "b1", b"")])
    lease = queue.lease(10_000)
    assert lease is not None and queue.nack(lease, dead=True)
    q = url_of(queue.name)
    browser.delete_all_cookies()
    with serving(create_app(client, [queue.name], write_token=TOKEN, interval_s=0.2)) as base:
        for page in (f"/queue?q={q}", f"/queue/tenants?q={q}", f"/queue/dead?q={q}",
                     f"/queue/tenant?q={q}&t=bob"):  # fmt: skip
            browser.get(base + page)
            until(lambda: "read-only" in browser.page_source)
            assert browser.find_elements(By.CSS_SELECTOR, "form.action") == []
            assert browser.find_elements(By.XPATH, "//button[text()='pause']") == []
        # The page itself cannot write either: a POST from it is refused.
        status = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"fetch('/actions/pause?q={q}&t=bob', {{method: 'POST'}}).then(r => done(r.status));"
        )
        assert status == 403
    assert not queue.partition("bob").paused


@contextlib.contextmanager
def served_elsewhere(page: str) -> Iterator[str]:
    """`page` served by a tiny http.server on another port of this host: another origin,
    but the same site as the view, so a `SameSite=Strict` cookie still goes along."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_page_of_another_origin_cannot_write_with_the_login(
    browser: WebDriver, client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue("alice", "a1", b"")
    q = url_of(queue.name)
    with serving(create_app(client, [queue.name], write_token=TOKEN, interval_s=0.2)) as base:
        log_in(browser, base)
        browser.get(f"{base}/queue/tenant?q={q}&t=alice")
        csrf = browser.find_element(By.CSS_SELECTOR, "#tenant form input[name='csrf']")
        leaked = csrf.get_attribute("value")
        # A page that posts a form to the view as it loads: without the CSRF token, and
        # with it (as if it had leaked). Its Origin gives it away either way.
        pause = f"{base}/actions/pause?q={q}&amp;t=alice"
        for fields in ("", f'<input type="hidden" name="csrf" value="{leaked}">'):
            attack = f'<form method="post" action="{pause}">{fields}</form>'
            attack += "<script>document.forms[0].submit()</script>"
            with served_elsewhere(attack) as elsewhere:
                browser.get(elsewhere)
                until(lambda: browser.current_url.startswith(base))
                until(lambda: "403: it comes from another origin" in browser.page_source)
        assert not queue.partition("alice").paused

        # The view's own buttons still write, and logging out ends the session.
        browser.get(f"{base}/queue/tenant?q={q}&t=alice")
        browser.find_element(By.XPATH, "//div[@id='tenant']//button[text()='pause']").click()
        until(lambda: "pause alice: paused" in browser.find_element(By.ID, "flash").text)
        assert queue.partition("alice").paused
        browser.find_element(By.XPATH, "//form[@class='logout']/button").click()
        until(lambda: "log in to write" in browser.page_source)
        browser.get(f"{base}/queue/tenant?q={q}&t=alice")
        assert browser.find_elements(By.CSS_SELECTOR, "form.action") == []


@pytest.mark.skipif(
    os.environ.get("VTRR_SCREENSHOTS") != "1", reason="VTRR_SCREENSHOTS=1 saves them"
)
def test_screenshots_of_a_demo_queue(browser: WebDriver, client: redis.Redis) -> None:
    queue = vtrr.Queue(client, "{demo-" + os.urandom(3).hex() + "}")
    rng = random.Random(7)
    tenants = [f"tenant-{n:02d}" for n in range(30)]
    queue.enqueue_many(
        Item(t, f"{t}-{k}", b'{"file": "report.pdf"}', weight=rng.choice((1, 1, 2, 5)))
        for i, t in enumerate(tenants)
        for k in range(int(600 / (i + 1)) + rng.randint(20, 80))
    )
    queue.set_limit("tenant-03", share=3)
    queue.set_limit("tenant-05", concurrency=2)
    queue.pause("tenant-07")
    queue.set_policy(max_timeouts=3, max_nacks=5)
    stop = threading.Event()

    def work() -> None:  # a steady worker with uneven arrivals, so the charts have lines
        n = 0
        while not stop.is_set():
            leases = queue.lease_many(30_000, 4)
            for lease in leases:
                n += 1
                if n % 40 == 0:
                    queue.nack(lease, dead=True)
                else:
                    queue.ack(lease)
            t = tenants[rng.randrange(len(tenants))]
            queue.enqueue_many(Item(t, f"{t}-late-{n}-{k}", b"") for k in range(rng.randint(1, 6)))
            time.sleep(0.1)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    out = REPO / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    try:
        with serving(create_app(client, [queue.name], write_token=TOKEN, interval_s=0.5)) as base:
            log_in(browser, base)
            browser.set_window_size(1400, 1700)
            browser.get(f"{base}/queue?q={url_of(queue.name)}")
            time.sleep(25)  # some history for the charts
            browser.save_screenshot(str(out / "web-queue.png"))
            browser.set_window_size(1400, 1200)
            browser.get(f"{base}/queue/tenants?q={url_of(queue.name)}&count=25")
            time.sleep(1)
            browser.save_screenshot(str(out / "web-tenants.png"))
    finally:
        stop.set()
        worker.join()
    assert Path(out / "web-queue.png").stat().st_size > 10_000
