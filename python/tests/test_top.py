"""`vtrr top` in a real terminal: tmux runs it, sends it keys and reads its screen."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from servers import Server

import vtrr
from vtrr import Item
from vtrr.top import TopApp, _Reading

VTRR = str(Path(sys.executable).parent / "vtrr")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Terminal:
    """A detached 160x50 tmux session of its own (its own server socket) running one command."""

    def __init__(self, *command: str) -> None:
        self.socket = "vtrr-top-" + uuid.uuid4().hex[:8]
        # COLUMNS and LINES too: under pytest the command got COLUMNS=80 and LINES=24, which
        # Textual (shutil.get_terminal_size) takes over the pane's size, cutting off the
        # table's right-hand columns.
        size = ("-x", "160", "-y", "50", "-e", "COLUMNS=160", "-e", "LINES=50")
        self.tmux("new-session", "-d", *size, "-s", "top", *command)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top").stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def running(self) -> bool:
        return self.tmux("has-session", "-t", "top").returncode == 0

    def kill(self) -> None:
        self.tmux("kill-server")


def until(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def open_top(server: Server, queue: vtrr.Queue) -> Iterator[Callable[..., Terminal]]:
    """Starts `vtrr top` on the test's queue (which must exist by then) with these options."""
    opened: list[Terminal] = []

    def start(*options: str) -> Terminal:
        opened.append(
            Terminal(VTRR, "--url", server.url, "top", queue.name, "--interval", "0.2", *options)
        )
        return opened[-1]

    yield start
    for each in opened:
        each.kill()


def test_top_shows_tenants_pauses_resumes_and_quits(
    queue: vtrr.Queue, open_top: Callable[..., Terminal]
) -> None:
    queue.enqueue_many(
        [Item("alice", f"a{i}", b"") for i in range(3)]
        + [Item("bob", f"b{i}", b"") for i in range(2)]
        + [Item("carol", "c0", b"")]
    )
    terminal = open_top("--write")
    until(lambda: all(t in terminal.screen() for t in ("alice", "bob", "carol")), "the tenants")
    until(lambda: "q quit" in terminal.screen(), "the footer")
    screen = terminal.screen()
    assert "queued 6" in screen and "by queued" in screen, screen
    assert "read-only" not in screen and "p pause tenant  r resume tenant" in screen, screen
    # Ranked by queued: alice, bob, carol. Down selects bob.
    terminal.keys("Down")
    time.sleep(0.3)  # a refresh in between must keep bob selected
    terminal.keys("p")
    until(lambda: queue.partition("bob").paused, "bob paused")
    assert not queue.partition("alice").paused
    until(lambda: "paused bob" in terminal.screen(), "the line saying so")
    # queued means every waiting item, held ones too, as STATS and the web view say.
    until(lambda: "queued 6  held 2" in terminal.screen(), "bob's items held, still queued")
    terminal.keys("r")
    until(lambda: not queue.partition("bob").paused, "bob resumed")
    terminal.keys("b")
    until(lambda: "by oldest" in terminal.screen(), "the next ranking")
    terminal.keys("q")
    until(lambda: not terminal.running(), "vtrr top to quit")


def line_of(screen: str, tenant: str) -> str:
    lines = [line for line in screen.splitlines() if f" {tenant} " in line]
    return lines[0] if lines else ""


def test_top_shows_a_throttled_tenants_rate_and_when_its_next_token_is_due(
    queue: vtrr.Queue, open_top: Callable[..., Terminal]
) -> None:
    # alice: one token a minute, spent on the lease below: none left, the next due in ~60 s.
    queue.set_limit("alice", rate=vtrr.Rate(1, 60_000))
    queue.enqueue_many(Item("alice", f"a{i}", b"") for i in range(3))
    lease = queue.lease(60_000)
    assert lease is not None and lease.id == "a0" and queue.lease(60_000) is None
    # bob: a full bucket of 8 (its burst); carol: no rate.
    queue.set_limit("bob", rate=vtrr.Rate(5, 1000, burst=8))
    queue.enqueue_many([Item("bob", "b0", b""), Item("carol", "c0", b"")])
    terminal = open_top()
    until(lambda: all(line_of(terminal.screen(), t) for t in ("alice", "bob", "carol")), "rows")
    screen = terminal.screen()
    assert "rate" in screen and "tokens" in screen, screen
    alice = line_of(screen, "alice")
    due = re.search(r" 1/60000ms +0, next in (\d+\.\d) s ", alice)
    assert due and 50 <= float(due[1]) <= 60, screen
    assert re.search(r" 5/1000ms b8 +8 ", line_of(screen, "bob")), screen
    carol = line_of(screen, "carol")
    assert "ms" not in carol and re.search(r" - +- ", carol), screen
    # The next refreshes count down to it.
    until(
        lambda: (
            (now := re.search(r"next in (\d+\.\d) s", line_of(terminal.screen(), "alice")))
            is not None
            and float(now[1]) < float(due[1])
        ),
        "the countdown",
    )


def test_top_shows_each_tenants_max_queued_in_force(
    queue: vtrr.Queue, open_top: Callable[..., Terminal]
) -> None:
    queue.set_policy(default_max_queued=40)
    queue.set_limit("alice", max_queued=9)
    queue.enqueue_many([Item("alice", "a0", b""), Item("bob", "b0", b"")])
    terminal = open_top()
    until(lambda: all(line_of(terminal.screen(), t) for t in ("alice", "bob")), "rows")
    screen = terminal.screen()
    assert "max queued" in screen, screen
    # Between the cap and the rate (neither set): its own, else the queue's default.
    assert re.search(r" - +9 +- ", line_of(screen, "alice")), screen
    assert re.search(r" - +40 +- ", line_of(screen, "bob")), screen


def test_a_read_answered_while_the_app_closes_is_dropped(queue: vtrr.Queue) -> None:
    # A read thread can answer after the app began to close (its screen gone).
    queue.enqueue("alice", "a", b"x")
    app = TopApp(queue, interval_s=60)

    async def run_then_close() -> None:
        async with app.run_test() as pilot:
            await pilot.pause(0.1)

    asyncio.run(run_then_close())
    stats = queue.stats()
    ranked, tenants = queue.partitions_top(5, "queued")
    app._show(_Reading(time.monotonic(), stats, "queued", ranked, tenants))
    app._say("after the close")


def test_top_is_read_only_unless_told_to_write(
    server: Server, queue: vtrr.Queue, open_top: Callable[..., Terminal]
) -> None:
    queue.enqueue_many([Item("alice", "a0", b""), Item("alice", "a1", b""), Item("bob", "b0", b"")])
    terminal = open_top()
    until(lambda: line_of(terminal.screen(), "bob") != "", "the tenants")
    until(lambda: "q quit" in terminal.screen(), "the footer")
    screen = terminal.screen()
    assert "read-only: vtrr top --write to pause and resume" in screen, screen
    assert "pause tenant" not in screen and "resume tenant" not in screen, (
        "the footer offers neither"
    )
    terminal.keys("Down")
    terminal.keys("p")
    queue.pause("alice")
    terminal.keys("r")
    time.sleep(0.6)  # three refreshes: time enough for a pause or resume to land
    assert not queue.partition("bob").paused and queue.partition("alice").paused
    assert "paused bob" not in terminal.screen() and "resumed" not in terminal.screen()
    terminal.keys("q")
    until(lambda: not terminal.running(), "vtrr top to quit")
    # Its options are its own: no --json (it prints no document); a missing queue is said so.
    json_option = subprocess.run(
        [VTRR, "--url", server.url, "top", queue.name, "--json"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert json_option.returncode == 2
    assert "vtrr top: error: unrecognized arguments: --json" in json_option.stderr
    missing = subprocess.run(
        [VTRR, "--url", server.url, "top", queue.name + "x"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert (missing.returncode, missing.stderr) == (
        1, f"vtrr top: no queue named {queue.name + 'x'!r} on redis://127.0.0.1:{server.port}/0\n"
    )  # fmt: skip
