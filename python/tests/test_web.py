"""`vtrr web`: its routes against a real server with the module (Starlette's TestClient),
and its streams over real HTTP (uvicorn in a thread)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from html import unescape
from types import SimpleNamespace
from urllib.parse import quote_from_bytes

import httpx
import pytest
import redis
import uvicorn
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import Cluster, Server, free_port, layout
from starlette.applications import Starlette
from starlette.testclient import TestClient

import vtrr
from vtrr import Item
from vtrr.web import access, close_streams, create_app
from vtrr.web.access import COOKIE, Throttle

TOKEN = "let-me-write"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
HTMX = {"HX-Request": "true"}
# Tenant names an operator's page must survive: markup, URL syntax, a newline, bytes
# that are not UTF-8 (decoded with surrogates, as the client does), other scripts.
ODD_TENANTS = ["<script>alert(1)</script>", "a/b?c=d&e#f", "line\nbreak", "caf\udce9", "租户 ☃"]


def url_of(name: str) -> str:
    return quote_from_bytes(name.encode("utf-8", "surrogateescape"), safe="")


@contextlib.contextmanager
def web(client: redis.Redis, queues: list[str], **options: object) -> Iterator[TestClient]:
    with TestClient(create_app(client, queues, **options)) as http:  # type: ignore[arg-type]
        yield http


@contextlib.contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """The app over real HTTP (uvicorn in a thread, on a free port): its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        close_streams(app)
        server.should_exit = True
        thread.join(10)


def wait_for[T](probe: Callable[[], T], seconds: float = 5.0) -> T:
    deadline = time.monotonic() + seconds
    while not (value := probe()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


class Clock:
    """A stand-in for a module's `time`: `monotonic()` is `now`, moved by the test."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


def links(html: str, path: str) -> list[str]:
    return [unescape(href) for href in re.findall(rf'href="({re.escape(path)}\?[^"]*)"', html)]


def test_every_page_answers_and_escapes_odd_names(client: redis.Redis, queue: vtrr.Queue) -> None:
    queue.enqueue("dying", "d1", b"\xffbinary payload")
    lease = queue.lease(10_000)
    error = "ValueError: <script>alert(2)</script>\nTraceback (most recent call last):\n  in run"
    assert lease is not None and queue.nack(lease, dead=True, reason=error)
    queue.enqueue_many(
        Item(t, f"{i}-{n}", b"x") for i, t in enumerate(ODD_TENANTS) for n in range(i + 1)
    )
    with web(client, [queue.name]) as http:
        q = url_of(queue.name)
        pages = [
            "/", f"/queue?q={q}", f"/queue/dead?q={q}",
            *(f"/queue/tenants?q={q}&by={by}" for by in vtrr.types.RANKS),
        ]  # fmt: skip
        for page in pages:
            answer = http.get(page)
            assert answer.status_code == 200, (page, answer.text)
            assert "<script>alert" not in answer.text
        # A dead item's last error: its summary, and the whole text below it.
        dead = http.get(f"/queue/dead?q={q}").text
        assert "<summary><code>ValueError: &lt;script&gt;alert(2)&lt;/script&gt;</code>" in dead
        assert "Traceback (most recent call last):\n  in run</pre>" in dead
        tenants = http.get(f"/queue/tenants?q={q}").text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tenants
        assert "caf\\xe9" in tenants and "line\\u000abreak" in tenants and "租户 ☃" in tenants
        # Each tenant's link leads to its own page, whatever its name holds.
        tenant_links = links(tenants, "/queue/tenant")
        assert len(tenant_links) == len(ODD_TENANTS)
        for name in ODD_TENANTS:
            assert f"/queue/tenant?q={q}&t={url_of(name)}" in tenant_links
            page = http.get(f"/queue/tenant?q={q}&t={url_of(name)}")
            assert page.status_code == 200
            queued = re.search(r"<dt>queued</dt><dd>(\d+)</dd>", page.text)
            assert queued and int(queued[1]) == ODD_TENANTS.index(name) + 1


def test_the_queue_page_shows_counts_policy_and_charts(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue_many([Item("alice", "a1", b""), Item("alice", "a2", b""), Item("bob", "b1", b"")])
    queue.set_policy(max_nacks=4)
    with web(client, [queue.name], interval_s=0.1) as http:

        def charted() -> str | None:
            """The page, once a few polls (an interval apart) gave its charts lines."""
            page = http.get(f"/queue?q={url_of(queue.name)}").text
            return page if page.count("<polyline") >= 4 else None

        page = wait_for(charted, seconds=30)
        assert re.search(r"<dt>queued</dt><dd>3</dd>", page)
        assert re.search(r"<dt>max nacks</dt><dd>4</dd>", page)
        assert page.count('<figure class="chart">') == 3 and page.count("<polyline") >= 4
        assert 'sse-connect="/queue/events?q=' in page
        rows = re.findall(r'<tr data-tenant="([^"]*)"', page)
        assert rows == ["alice", "bob"]  # most queued first


def test_the_queue_page_shows_the_queues_own_limits_and_how_long_it_keeps_finished_jobs(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue_many(Item("alice", f"a{n}", b"") for n in range(3))
    with web(client, [queue.name], interval_s=0.1) as http:

        def page() -> str:
            return unescape(http.get(f"/queue?q={url_of(queue.name)}").text)

        def after_the_leases() -> str | None:
            """The page, once a sample of the poller's (its live part) read the
            bucket after the two leases: one taken between the policy and the
            leases shows it full."""
            shown = page()
            return shown if '<dd class="queue-tokens">2</dd>' in shown else None

        shown = page()
        assert '<dt>queue cap</dt><dd class="queue-cap">none</dd>' in shown
        assert '<dt>queue rate</dt><dd class="queue-rate">none</dd>' in shown
        assert '<dt>results kept</dt><dd class="result-ttl">none</dd>' in shown
        assert '<dt>dedup window</dt><dd class="dedup">none</dd>' in shown
        assert "queue tokens" not in shown, "no queue rate, no bucket"
        queue.set_policy(concurrency=2, rate=vtrr.Rate(5, per_ms=60_000, burst=4))
        queue.set_policy(result_ttl_ms=86_400_000, dedup_ms=60_000)
        assert len(queue.lease_many(60_000, 10)) == 2, "the cap"
        shown = wait_for(after_the_leases)
        assert '<dt>results kept</dt><dd class="result-ttl">86400000 ms</dd>' in shown
        assert '<dt>dedup window</dt><dd class="dedup">60000 ms</dd>' in shown
        assert '<dt>queue cap</dt><dd class="queue-cap">2</dd>' in shown
        assert '<dt>queue rate</dt><dd class="queue-rate">5/60000ms, burst 4</dd>' in shown
        assert '<dt>queue tokens</dt><dd class="queue-tokens">2</dd>' in shown


def test_a_missing_queue_is_a_404_page(client: redis.Redis, queue_name: str) -> None:
    with web(client, ["{given}"]) as http:
        for page in ("/queue?q=nope", "/queue/tenants?q=nope", "/queue", "/queue/events?q=x"):
            answer = http.get(page)
            assert answer.status_code == 404 and "There is no queue named" in answer.text
        assert "Traceback" not in answer.text
        assert http.get("/no/such/page").status_code == 404
    with web(client, []) as http:  # discovered: a queue with no keys is not there
        assert http.get(f"/queue?q={url_of(queue_name)}").status_code == 404


def test_bad_parameters_are_400_pages(client: redis.Redis, queue: vtrr.Queue) -> None:
    queue.enqueue("a", "1", b"")
    q = url_of(queue.name)
    with web(client, [queue.name], write_token=TOKEN) as http:
        for page in (
            f"/queue/tenants?q={q}&by=newest",
            f"/queue/tenants?q={q}&offset=-1",
            f"/queue/tenants?q={q}&offset=ten",
            f"/queue/tenants?q={q}&count=0",
            f"/queue/tenant?q={q}",
            f"/queue/dead?q={q}&count=100000",
            "/?offset=%FF",
        ):
            answer = http.get(page)
            assert answer.status_code == 400, page
            assert 'class="banner"' in answer.text
        for body in ("concurrency=lots", "share=-2", ""):
            answer = http.post(
                f"/actions/limit?q={q}&t=a",
                content=body,
                headers={**BEARER, "Content-Type": "application/x-www-form-urlencoded"},
            )
            assert answer.status_code == 400, body
        assert http.post(f"/actions/pause?q={q}", headers=BEARER).status_code == 400  # no tenant
        assert http.post(f"/actions/explode?q={q}", headers=BEARER).status_code == 404


def test_read_only_without_a_token(client: redis.Redis, queue: vtrr.Queue) -> None:
    queue.enqueue("alice", "a1", b"")
    lease = queue.lease(10_000)
    assert lease is not None and queue.nack(lease, dead=True)
    q = url_of(queue.name)
    with web(client, [queue.name]) as http:
        for page in (f"/queue?q={q}", f"/queue/tenants?q={q}", f"/queue/dead?q={q}",
                     f"/queue/tenant?q={q}&t=alice"):  # fmt: skip
            html = http.get(page).text
            assert "/actions/" not in html and "read-only" in html
        for action in ("pause", "resume", "limit", "policy", "revive", "cancel"):
            answer = http.post(f"/actions/{action}?q={q}&t=alice&id=a1", data={"share": "2"})
            assert answer.status_code == 403
        # Even with a token in hand: this app takes none.
        assert http.post(f"/actions/pause?q={q}&t=alice", headers=BEARER).status_code == 403
    assert not queue.partition("alice").paused and queue.stats().dead == 1


def test_writes_need_the_token_as_bearer_or_login_cookie(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue("alice", "a1", b"")
    q = url_of(queue.name)
    with web(client, [queue.name], write_token=TOKEN) as http:
        page = http.get(f"/queue/tenants?q={q}").text
        assert "/actions/" not in page and "log in to write" in page
        assert http.post(f"/actions/pause?q={q}&t=alice").status_code == 403
        wrong = {"Authorization": "Bearer nope"}
        assert http.post(f"/actions/pause?q={q}&t=alice", headers=wrong).status_code == 403
        assert not queue.partition("alice").paused

        paused = http.post(f"/actions/pause?q={q}&t=alice", headers=BEARER, follow_redirects=False)
        assert paused.status_code == 303
        assert queue.partition("alice").paused

        assert http.post("/login", data={"token": "nope"}).status_code == 403
        back = f"/queue/tenants?q={q}"
        login = http.post("/login", data={"token": TOKEN, "next": back}, follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == back
        cookie = login.headers["set-cookie"].lower()
        assert "samesite=strict" in cookie and "httponly" in cookie
        assert f"max-age={12 * 3600}" in cookie  # the default session: 12 hours
        assert TOKEN not in login.headers["set-cookie"]
        page = http.get(back).text
        assert f"/actions/resume?q={q}&amp;t=alice" in page and "can write" in page
        resumed = http.post(
            f"/actions/resume?q={q}&t=alice", data={"csrf": csrf_of(page)}, follow_redirects=False
        )
        assert resumed.status_code == 303
        assert not queue.partition("alice").paused
        # An open redirect is not: the next page is always on this site.
        away = http.post(
            "/login", data={"token": TOKEN, "next": "//evil.example/"}, follow_redirects=False
        )
        assert away.headers["location"] == "/"
        http.post("/logout", data={"csrf": csrf_of(http.get("/").text)})
        assert "log in to write" in http.get(back).text
        assert http.post(f"/actions/pause?q={q}&t=alice").status_code == 403


def csrf_of(html: str) -> str:
    """The session's CSRF token, as a page's forms carry it."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF token"
    return found[1]


def logged_in(http: TestClient) -> tuple[str, str]:
    """Log in: the session's cookie and its CSRF token."""
    login = http.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert login.status_code == 303, login.text
    return login.cookies[COOKIE], csrf_of(http.get("/").text)


def test_a_session_writes_only_with_its_csrf_token(client: redis.Redis, queue: vtrr.Queue) -> None:
    queue.enqueue("alice", "a1", b"")
    q = url_of(queue.name)
    pause = f"/actions/pause?q={q}&t=alice"
    with web(client, [queue.name], write_token=TOKEN) as http:
        _, csrf = logged_in(http)
        _, others_csrf = logged_in(TestClient(http.app))  # another browser's session
        assert csrf != others_csrf
        # Every form that posts carries it, and htmx sends it as a header.
        page = http.get(f"/queue/tenant?q={q}&t=alice").text
        forms = re.findall(r'<form method="post".*?</form>', page, re.S)
        assert len(forms) >= 4 and all(f'name="csrf" value="{csrf}"' in form for form in forms)
        assert f"""<body hx-headers='{{"X-CSRF-Token": "{csrf}"}}'>""" in page
        # The cookie alone, a wrong token, another session's: refused, nothing changed.
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        for body in ("", "csrf=forged", f"csrf={others_csrf}", "csrf=%FF"):
            refused = http.post(pause, content=body, headers=form)
            assert refused.status_code == 403 and "CSRF token" in refused.text, body
        assert http.post(pause, headers={"X-CSRF-Token": others_csrf}).status_code == 403
        assert not queue.partition("alice").paused
        # Its own, as the form field or as htmx's header.
        assert http.post(pause, data={"csrf": csrf}, follow_redirects=False).status_code == 303
        assert queue.partition("alice").paused
        resumed = http.post(
            f"/actions/resume?q={q}&t=alice", headers={**HTMX, "X-CSRF-Token": csrf}
        )
        assert resumed.status_code == 200 and not queue.partition("alice").paused
        # Logging out needs it too: a forged logout ends nothing.
        assert http.post("/logout", data={"csrf": "forged"}).status_code == 403
        assert "can write" in http.get("/").text


def test_a_sessions_live_table_carries_its_csrf_token(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue("alice", "a1", b"")
    app = create_app(client, [queue.name], write_token=TOKEN, interval_s=0.1)
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        assert http.post("/login", data={"token": TOKEN}).status_code == 303
        csrf = csrf_of(http.get("/").text)
        with http.stream("GET", f"/queue/events?q={url_of(queue.name)}") as stream:
            [live] = read_events(stream, 1)
    assert "/actions/pause" in live and f'name="csrf" value="{csrf}"' in live


def test_a_post_that_may_not_write_is_refused_before_its_body_is_read(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue("alice", "a1", b"")
    with serving(create_app(client, [queue.name], write_token=TOKEN)) as base:
        host, port = base.removeprefix("http://").split(":")
        for path in (f"/actions/pause?q={url_of(queue.name)}&t=alice", "/logout"):
            # A gigabyte announced, none sent: an answer now means the body was never awaited.
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    f"Content-Length: {10**9}\r\n\r\n".encode()
                )
                status = conn.recv(100).split(b"\r\n")[0]
            assert status in (b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 303 See Other"), (path, status)
    assert not queue.partition("alice").paused


def test_a_write_token_and_session_must_make_sense(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="write_token must not be empty"):
        create_app(client, [], write_token="")
    with pytest.raises(ValueError, match="session_s must be positive"):
        create_app(client, [], write_token=TOKEN, session_s=0)


def test_a_post_from_another_origin_is_refused(
    client: redis.Redis, queue: vtrr.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.enqueue("alice", "a1", b"")
    q = url_of(queue.name)
    pause = f"/actions/pause?q={q}&t=alice"
    with web(client, [queue.name], write_token=TOKEN) as http:
        _, csrf = logged_in(http)
        for foreign in (
            {"Origin": "http://testserver:8081"},  # another port of this host: the same site
            {"Origin": "https://testserver"},
            {"Origin": "null"},
            {"Referer": "http://127.0.0.1:8081/attack.html"},
            {"Origin": "http://evil.example", "Referer": "http://testserver/"},
        ):
            refused = http.post(pause, data={"csrf": csrf}, headers=foreign)
            assert refused.status_code == 403 and "another origin" in refused.text, foreign
            assert http.post(pause, headers={**BEARER, **foreign}).status_code == 403, foreign
            login = http.post("/login", data={"token": TOKEN}, headers=foreign)
            assert login.status_code == 403 and "set-cookie" not in login.headers, foreign
        assert not queue.partition("alice").paused
        assert "refused POST /actions/pause" in caplog.text and "'null'" in caplog.text
        # Its own pages' posts, with or without a default port, go through.
        for own in (
            {"Origin": "http://testserver"},
            {"Origin": "HTTP://TestServer:80"},
            {"Referer": f"http://testserver/queue/tenant?q={q}&t=alice"},
        ):
            done = http.post(pause, data={"csrf": csrf}, headers=own, follow_redirects=False)
            assert done.status_code == 303, own
            assert queue.partition("alice").paused
            queue.resume("alice")


def test_the_session_expires_and_logging_out_ends_it(
    client: redis.Redis, queue: vtrr.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue("alice", "a1", b"")
    # The sessions' clock moves only when the test moves it: a slow machine
    # cannot end the session before the test has used it.
    clock = Clock()
    monkeypatch.setattr(access, "time", clock)
    q = url_of(queue.name)
    pause = f"/actions/pause?q={q}&t=alice"

    def replayed(http: TestClient, cookie: str, csrf: str) -> int:
        """The status of a write with this cookie and token, sent as they were."""
        http.cookies.clear()
        headers = {"Cookie": f"{COOKIE}={cookie}", "X-CSRF-Token": csrf}
        return http.post(pause, headers=headers, follow_redirects=False).status_code

    with web(client, [queue.name], write_token=TOKEN, session_s=1) as http:
        login = http.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert "max-age=1;" in login.headers["set-cookie"].lower()
        cookie, csrf = logged_in(http)
        assert cookie != login.cookies[COOKIE], "a random id, not a function of the token"
        # The server ends it on time, whatever the browser keeps.
        clock.now += 1.0
        assert replayed(http, cookie, csrf) == 403
        page = http.get("/", headers={"Cookie": f"{COOKIE}={cookie}"}).text
        assert "log in to write" in page and "csrf" not in page
    with web(client, [queue.name], write_token=TOKEN) as http:
        cookie, csrf = logged_in(http)
        out = http.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
        assert replayed(http, cookie, csrf) == 403
        assert not queue.partition("alice").paused
        # A new login is a new session; the old one stays ended.
        new_cookie, new_csrf = logged_in(http)
        assert replayed(http, new_cookie, new_csrf) == 303
        assert replayed(http, cookie, csrf) == 403


def test_malformed_login_input_is_a_400_or_ignored_never_a_500(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue("alice", "a1", b"")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    with web(client, [queue.name], write_token=TOKEN) as http:
        bad = http.post("/login", content="token=%FF", headers=form)
        assert bad.status_code == 400 and "the token is not UTF-8 text" in bad.text
        assert "set-cookie" not in bad.headers
        # A next page that is not text is no page of this site: back to the start.
        login = http.post(
            "/login", content=f"token={TOKEN}&next=/%FF", headers=form, follow_redirects=False
        )
        assert login.status_code == 303 and login.headers["location"] == "/"
        _, csrf = logged_in(http)
        done = http.post(
            f"/actions/pause?q={url_of(queue.name)}&t=alice",
            content=f"csrf={csrf}&next=/queue%FF",
            headers=form,
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"] == "/"
        assert queue.partition("alice").paused


def test_wrong_tokens_are_logged_and_slowed_down_per_address(
    client: redis.Redis,
    queue: vtrr.Queue,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="vtrr.web")
    interval, queued = Throttle.INTERVAL_S, int(Throttle.MAX_WAIT_S / Throttle.INTERVAL_S)
    # The throttle's clock moves only when the test moves it, and each wait it
    # asks for is recorded and held until the test lets it go: what it decides
    # then depends on the tries alone, not on how fast this machine sends them.
    clock = Clock()
    monkeypatch.setattr(access, "time", clock)
    waits: list[float] = []
    let_go = threading.Event()

    async def wait_turn(seconds: float) -> None:
        waits.append(seconds)
        while not let_go.is_set():
            await asyncio.sleep(0.01)

    monkeypatch.setattr(access, "asyncio", SimpleNamespace(sleep=wait_turn))
    # The server ends first: on a failure it cuts the tries it still holds.
    with (
        concurrent.futures.ThreadPoolExecutor(queued + 3) as pool,
        serving(create_app(client, [queue.name], write_token=TOKEN)) as base,
    ):

        def log_in(token: str) -> httpx.Response:
            return httpx.post(f"{base}/login", data={"token": token}, timeout=30)

        # The burst is answered at once (a mistyped token or two costs nothing).
        for _ in range(Throttle.BURST):
            assert log_in("nope").status_code == 403
        assert waits == []
        # A bearer token is a try too, from the same bucket: past the burst, it waits.
        bearer = pool.submit(
            httpx.get, f"{base}/", headers={"Authorization": "Bearer nope"}, timeout=30
        )
        wait_for(lambda: waits)
        assert waits == [interval] and not bearer.done()
        # An interval later the bucket holds one more try. Past the burst each try
        # waits its turn, one an interval; past the longest wait it is refused at once.
        clock.now += interval
        tries = [pool.submit(log_in, "nope") for _ in range(queued + 2)]
        # Each try is decided (a wait asked, or an answer) before it waits.
        wait_for(lambda: len(waits) - 1 + sum(t.done() for t in tries) == len(tries), seconds=30)
        assert sorted(waits[1:]) == [turn * interval for turn in range(1, queued + 1)], waits
        refused = [t.result() for t in tries if t.done()]
        assert len(refused) == 2, [answer.status_code for answer in refused]
        for answer in refused:
            assert answer.status_code == 429 and int(answer.headers["Retry-After"]) > 0
            assert "too many tries of the write token" in answer.text
        # Meanwhile the view serves everyone else.
        assert httpx.get(f"{base}/login", timeout=30).status_code == 200
        assert not bearer.done() and sum(t.done() for t in tries) == 2, "the waiting tries wait"
        let_go.set()
        assert bearer.result().status_code == 403
        assert sorted(t.result().status_code for t in tries) == [403] * queued + [429] * 2
        # The right token, once its turn comes (the waits have passed), forgets the
        # address's wrong ones.
        clock.now += queued * interval
        answer = log_in(TOKEN)
        assert answer.status_code == 303 and COOKIE in answer.cookies
        assert waits[1 + queued :] == [interval], waits
        assert log_in("nope").status_code == 403
        assert len(waits) == 2 + queued, "a wrong try after the right one: at once"
    failed = [r for r in caplog.records if r.getMessage().startswith("wrong write token")]
    assert all(r.levelno == logging.WARNING for r in failed)
    assert [r.getMessage() for r in failed].count(
        "wrong write token (login form) from 127.0.0.1"
    ) == Throttle.BURST + queued + 1
    assert [r.getMessage() for r in failed].count("wrong write token (bearer) from 127.0.0.1") == 1


def test_every_action_works_and_is_logged(
    client: redis.Redis, queue: vtrr.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = "caf\udce9 <&>"
    queue.enqueue_many(
        [Item(tenant, "t1", b""), Item("other", "o1", b""), Item("other", "o2", b"")]
    )
    for _ in range(2):
        lease = queue.lease(10_000)
        assert lease is not None and queue.nack(lease, dead=True)
    dead_ids = sorted(item.id for item in queue.dead(10))
    q, t = url_of(queue.name), url_of(tenant)
    form = {**BEARER, **HTMX, "Content-Type": "application/x-www-form-urlencoded"}
    caplog.set_level(logging.INFO, logger="vtrr.web")
    with web(client, [queue.name], write_token=TOKEN) as http:

        def act(action: str, body: str = "") -> httpx.Response:
            answer = http.post(f"/actions/{action}", content=body, headers=form)
            assert answer.status_code == 200, answer.text
            assert answer.headers["HX-Trigger"] == "vtrr-changed"
            return answer

        assert "paused" in act(f"pause?q={q}&t={t}").text
        assert queue.partition(tenant).paused
        assert "was already paused" in act(f"pause?q={q}&t={t}").text
        act(f"resume?q={q}&t={t}")
        assert not queue.partition(tenant).paused
        assert "cap 2, share 3" in act(f"limit?q={q}&t={t}", "concurrency=2&share=3").text
        assert queue.limit(tenant).concurrency == 2 and queue.limit(tenant).share == 3
        assert "cap none" in act(f"limit?q={q}&t={t}", "concurrency=none").text
        assert queue.limit(tenant).concurrency is None
        act(f"policy?q={q}", "max_timeouts=3&max_nacks=none")
        assert queue.policy().max_timeouts == 3 and queue.policy().max_nacks is None
        assert "revived" in act(f"revive?q={q}&id={url_of(dead_ids[0])}").text
        assert "cancelled" in act(f"cancel?q={q}&id={url_of(dead_ids[1])}").text
        assert queue.stats().dead == 0 and queue.stats().queued == 2
        assert "not dead" in act(f"revive?q={q}&id=gone").text
        # A value the module refuses is a 400 with its message, and logged as failed.
        refused = http.post(f"/actions/limit?q={q}&t={t}", content="share=0", headers=form)
        assert refused.status_code == 400 and "share must be" in refused.text.lower()

    lines = [r.getMessage() for r in caplog.records if r.name == "vtrr.web"]
    assert len(lines) == 10
    assert all(line.startswith("bearer@testclient ") for line in lines)
    assert f"pause queue={queue.name!r} tenant={tenant!r}: paused" in lines[0]
    assert lines[-1].startswith(f"bearer@testclient limit queue={queue.name!r} tenant=")
    assert "failed" in lines[-1]
    assert all("\n" not in line for line in lines)


def test_the_limit_form_sets_and_removes_a_rate_and_the_pages_show_it(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    tenant = "caf\udce9 <&>"
    queue.enqueue_many(Item(tenant, f"t{n}", b"") for n in range(4))
    q, t = url_of(queue.name), url_of(tenant)
    form = {**BEARER, **HTMX, "Content-Type": "application/x-www-form-urlencoded"}
    with web(client, [queue.name], write_token=TOKEN, interval_s=0.1) as http:

        def limit(body: str) -> httpx.Response:
            return http.post(f"/actions/limit?q={q}&t={t}", content=body, headers=form)

        def tenant_page() -> str:
            return unescape(http.get(f"/queue/tenant?q={q}&t={t}", headers=BEARER).text)

        # No rate yet: the page says none and offers to set one, not to remove one.
        page = tenant_page()
        assert '<dt>rate (own)</dt><dd class="rate">none</dd>' in page
        assert 'name="per_ms"' in page and "remove rate" not in page
        set_rate = limit("rate=1&per_ms=60000&burst=2")
        assert set_rate.status_code == 200 and set_rate.headers["HX-Trigger"] == "vtrr-changed"
        assert "rate 1/60000ms, burst 2" in unescape(set_rate.text)
        assert queue.limit(tenant).rate == vtrr.Rate(1, 60_000, 2)
        # Two leases spend its burst; its third item waits a minute for a token.
        assert [lease.id for lease in queue.lease_many(60_000, 5)] == ["t0", "t1"]
        assert queue.partition(tenant).tokens == 0
        queue.enqueue("bob", "b1", b"")  # bob: no rate

        page = tenant_page()
        assert '<dt>rate (own)</dt><dd class="rate">1/60000ms, burst 2</dd>' in page
        assert '<dt>tokens</dt><dd class="tokens">0</dd>' in page
        due = re.search(r'<dt>next token</dt><dd class="next-token">in (\d+\.\d) s</dd>', page)
        assert due and 50 <= float(due[1]) <= 60, page
        assert "remove rate" in page and 'name="rate" value="none"' in page
        # The tables, ranked and live, show it in its row; bob has none.
        for table in (f"/queue/tenants?q={q}", f"/queue?q={q}"):
            html = unescape(http.get(table, headers=BEARER).text)
            row = re.search(rf'<tr data-tenant="{re.escape(t)}".*?</tr>', html, re.S)
            assert row, html
            cells = re.findall(r'<td class="num (rate|tokens)">([^<]*)</td>', row[0])
            assert cells[0] == ("rate", "1/60000ms, burst 2"), cells
            assert re.fullmatch(r"0, next in \d+\.\d s", cells[1][1]), cells
            bob = re.search(r'<tr data-tenant="bob".*?</tr>', html, re.S)
            assert bob, html
            bob_cells = re.findall(r'<td class="num (?:rate|tokens)">([^<]*)</td>', bob[0])
            assert bob_cells == ["\N{EN DASH}", "\N{EN DASH}"], bob_cells

        # Bad input: a 400 saying what is wrong, and nothing written (a rate written again
        # would refill the bucket; the cap and share are unchanged too).
        before = queue.limit(tenant)
        for body, says in (
            ("rate=five&per_ms=1000", "rate must be a whole number or none, not 'five'"),
            ("rate=\u00b2&per_ms=1000", "rate must be a whole number or none"),
            ("rate=5", "a rate needs per_ms"),
            ("rate=5&per_ms=soon", "per_ms (the rate's period in ms) must be a whole number"),
            ("rate=5&per_ms=1000&burst=-1", "burst (the most tokens the bucket holds) must be"),
            ("per_ms=1000", "per_ms and burst go with a rate"),
            ("share=4&burst=3", "per_ms and burst go with a rate"),
            ("rate=none&per_ms=1000", "rate none removes the rate"),
            # Out of the module's range: it refuses, having written none of the options.
            ("concurrency=3&rate=0&per_ms=1000", "rate must be an integer between 1"),
            ("share=4&rate=5&per_ms=86400001", "must be followed by per <ms>"),
            ("rate=5&per_ms=1000&burst=0", "burst must be an integer between 1"),
        ):
            refused = limit(body)
            assert refused.status_code == 400, (body, refused.text)
            assert 'class="banner"' in refused.text
            assert says in unescape(refused.text).lower(), (body, refused.text)
            assert queue.limit(tenant) == before, body
            assert queue.partition(tenant).tokens == 0, body

        removed = limit("rate=none")
        assert removed.status_code == 200 and "rate none" in removed.text
        assert queue.limit(tenant).rate is None
        page = tenant_page()
        assert '<dt>rate (own)</dt><dd class="rate">none</dd>' in page
        assert "<dt>tokens</dt>" not in page and "remove rate" not in page
        # Without its rate, its other items are leased at once.
        assert {lease.id for lease in queue.lease_many(60_000, 5)} == {"t2", "t3", "b1"}
        # The queue's default rate is the one in force for it now, shown as such.
        queue.set_policy(default_rate=vtrr.Rate(3, 1000))
        page = tenant_page()
        assert '<dt>rate (own)</dt><dd class="rate">none</dd>' in page
        assert '<dt>rate in force</dt><dd class="rate-in-force">3/1000ms</dd>' in page
        assert '<dt>tokens</dt><dd class="tokens">3</dd>' in page
        queue.set_policy(default_rate="NONE")


def test_the_tenant_page_shows_max_queued_beside_the_cap(
    client: redis.Redis, queue: vtrr.Queue
) -> None:
    queue.enqueue_many([Item("alice", "a1", b""), Item("bob", "b1", b"")])
    queue.set_limit("alice", max_queued=5)
    queue.set_policy(default_max_queued=3)
    with web(client, [queue.name]) as http:

        def max_queued(tenant: str) -> tuple[str, str]:
            """Its own MAX-QUEUED and the one in force, as its page shows them."""
            page = unescape(http.get(f"/queue/tenant?q={url_of(queue.name)}&t={tenant}").text)
            shown = re.search(
                r"<dt>cap in force</dt><dd>[^<]*</dd></div>\s*"
                r'<div><dt>max queued \(own\)</dt><dd class="max-queued">([^<]*)</dd></div>\s*'
                r'<div><dt>max queued in force</dt><dd class="max-queued-in-force">([^<]*)</dd>',
                page,
            )
            assert shown, page
            return shown[1], shown[2]

        assert max_queued("alice") == ("5", "5")
        assert max_queued("bob") == ("none", "3"), "the queue's default"
        policy = unescape(http.get(f"/queue?q={url_of(queue.name)}").text)
        assert '<dt>default max queued</dt><dd class="default-max-queued">3</dd>' in policy
        queue.set_policy(default_max_queued="NONE")
        assert max_queued("bob") == ("none", "none")


def test_queues_are_discovered_by_scan(make_server: Callable[..., Server], queue_name: str) -> None:
    # A server of its own: the page lists 50 queues, and the suite's shared
    # server holds as many as the tests before this one made.
    client = make_server().client()
    queue = vtrr.Queue(client, queue_name)
    queue.enqueue("a", "1", b"")
    client.set(f"vtrr-not-a-queue:{uuid.uuid4().hex}", "x")
    with web(client, []) as http:
        page = http.get("/").text
        assert f'href="/queue?q={url_of(queue.name)}"' in page
        assert "vtrr-not-a-queue" not in page
        assert http.get(f"/queue?q={url_of(queue.name)}").status_code == 200


def test_a_queue_that_holds_only_schedules_is_discovered(
    make_server: Callable[..., Server], queue_name: str
) -> None:
    """Any key of a queue names it: the web view and the exporter share the client's list."""
    client = make_server().client()  # of its own, as in the test above
    queue = vtrr.Queue(client, queue_name)
    queue.schedule("nightly", every_ms=86_400_000, partition="ops", payload=b"x")
    with web(client, []) as http:
        assert f'href="/queue?q={url_of(queue.name)}"' in http.get("/").text
        assert f'vtrr_queue_items{{queue="{queue.name}"' in http.get("/metrics").text


def test_a_server_that_cannot_be_reached_shows_a_banner(
    make_server: Callable[..., Server], queue_name: str
) -> None:
    server = make_server()
    # No retries: redis-py's default backoff would make each refused call take seconds.
    client = server.client(socket_timeout=2, retry=Retry(NoBackoff(), 0))
    vtrr.Queue(client, queue_name).enqueue("a", "1", b"")
    app = create_app(client, [queue_name], interval_s=0.1)
    server.stop()
    q = url_of(queue_name)
    with TestClient(app) as http:
        page = http.get(f"/queue?q={q}")
        assert page.status_code == 200  # the page, with the banner; its stream says when it is back
        assert "Redis cannot be reached" in page.text and 'role="alert"' in page.text
        for other in (f"/queue/tenants?q={q}", f"/queue/tenant?q={q}&t=a", f"/queue/dead?q={q}"):
            answer = http.get(other)
            assert answer.status_code == 503 and "Redis cannot be reached" in answer.text
            assert "Traceback" not in answer.text
        assert "cannot be reached" in http.get("/").text
    with TestClient(create_app(client, [])) as http:  # discovery cannot scan either
        answer = http.get("/")
        assert answer.status_code == 503 and "Redis cannot be reached" in answer.text
    with (
        serving(create_app(client, [queue_name], interval_s=0.1)) as base,
        httpx.stream("GET", f"{base}/queue/events?q={q}", timeout=10) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = read_events(stream, 1)[0]
    assert "Redis cannot be reached" in event


def read_events(stream: httpx.Response, count: int) -> list[str]:
    """The data of the next `count` server-sent events."""
    events: list[str] = []
    data: list[str] = []
    for line in stream.iter_lines():
        if line.startswith("data: "):
            data.append(line[6:])
        elif not line and data:
            events.append("\n".join(data))
            data = []
            if len(events) == count:
                break
    return events


def commandstats_calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_many_streams_share_one_poll_per_interval(
    make_server: Callable[..., Server], queue_name: str
) -> None:
    server = make_server()  # its own server: every VTRR.STATS it counts is the view's
    client = server.client()
    vtrr.Queue(client, queue_name).enqueue("alice", "1", b"")
    interval, streams, events = 0.2, 12, 6
    app = create_app(client, [queue_name], interval_s=interval)
    with serving(app) as base:
        url = f"{base}/queue/events?q={url_of(queue_name)}"

        def watch(_: int) -> list[str]:
            with httpx.stream("GET", url, timeout=10) as stream:
                return read_events(stream, events)

        before = commandstats_calls(client, "vtrr.stats")
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(streams) as pool:
            seen = list(pool.map(watch, range(streams)))
        elapsed = time.monotonic() - started
        polls = commandstats_calls(client, "vtrr.stats") - before
        # With every stream closed, the poller stops (after a short linger).
        poller = app.state.web.pollers[queue_name]
        wait_for(lambda: not poller.running, seconds=5)
        stopped_at = commandstats_calls(client, "vtrr.stats")
        time.sleep(3 * interval)
        assert commandstats_calls(client, "vtrr.stats") == stopped_at
    assert all(len(got) == events and "alice" in got[-1] for got in seen)
    # One poller for the queue: about elapsed/interval polls, not one per stream.
    assert polls <= elapsed / interval + 2, (polls, elapsed)
    assert polls < streams * events / 3


def test_metrics_are_served(client: redis.Redis, queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("alice", "1", b""), Item("bob", "2", b"")])
    with web(client, [queue.name]) as http:
        answer = http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert f'vtrr_queue_items{{queue="{queue.name}",state="ready"}} 2.0' in answer.text


@pytest.mark.skipif(layout() == "native", reason="the load test runs on the keys layout only")
def test_every_page_reads_a_page_of_100k_tenants_and_1m_items_not_all(
    make_server: Callable[..., Server], queue_name: str
) -> None:
    server = make_server()
    client = server.client()
    # Uneven backlogs (1 to 19 items, 10 on average), each tenant's items in a run:
    # VTRR.ENQUEUE takes 10,000 items a call, pipelined 20 calls at a time.
    tenants, batch = 100_000, 10_000
    backlog = [1 + (n * 7) % 19 + (n < 6) for n in range(tenants)]
    pipe = client.pipeline(transaction=False)
    args: list[object] = []
    for n, count in enumerate(backlog):
        for k in range(count):
            args += [f"tenant-{n}", f"item-{n}-{k}", 1 + n % 5, b"p"]
        if len(args) >= 4 * batch or n == tenants - 1:
            pipe.execute_command("VTRR.ENQUEUE", queue_name, *args)
            args = []
            if len(pipe) == 20 or n == tenants - 1:
                pipe.execute()
    queue = vtrr.Queue(client, queue_name)
    assert queue.stats().queued == sum(backlog) >= 1_000_000
    leases = queue.lease_many(60_000, 100)
    for lease in leases[:20]:
        queue.nack(lease, dead=True)
    q = url_of(queue_name)
    pages = [
        "/",
        f"/queue?q={q}",
        *(f"/queue/tenants?q={q}&by={by}" for by in vtrr.types.RANKS),
        f"/queue/tenants?q={q}&by=queued&offset={tenants - 50}",
        f"/queue/tenants?q={q}&by=oldest&offset={tenants // 2}",
        f"/queue/tenant?q={q}&t=tenant-4242",
        f"/queue/dead?q={q}",
    ]
    # What a page costs the server, not how long it takes (that is the machine's):
    # once the queue was found, the commands and the bytes of one load. A page that
    # read the 100,000 tenants would read megabytes (or make a hundred calls).
    with web(client, [], interval_s=0.5) as http:
        for page in pages:
            assert http.get(page).status_code == 200, page  # the scan for queues, the first poll
            before = client.info("stats")
            assert http.get(page).status_code == 200, page
            after = client.info("stats")
            calls = after["total_commands_processed"] - before["total_commands_processed"] - 1
            read = after["total_net_output_bytes"] - before["total_net_output_bytes"]
            assert calls <= 20 and read <= 512 * 1024, (page, calls, read)


def test_a_cluster_queue_is_found_on_its_node_and_shown(cluster: Cluster) -> None:
    client = cluster.client()
    name = "{web-" + uuid.uuid4().hex[:8] + "}"
    vtrr.Queue(client, name).enqueue_many([Item("alice", "1", b""), Item("bob", "2", b"")])
    with TestClient(create_app(client, [])) as http:
        # The cluster is shared with other suites: the queue may be on a later page.
        link = f'href="/queue?q={url_of(name)}"'
        pages = (http.get(f"/?offset={offset}").text for offset in range(0, 1000, 50))
        assert any(link in listing for listing in pages)
        page = http.get(f"/queue?q={url_of(name)}").text
        assert re.search(r"<dt>queued</dt><dd>2</dd>", page)
        assert http.get(f"/queue/tenants?q={url_of(name)}").status_code == 200
