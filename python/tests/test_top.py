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
def terminal(server: Server, queue: vtrr.Queue) -> Iterator[Terminal]:
    running = Terminal(VTRR, "--url", server.url, "top", queue.name, "--interval", "0.2")
    yield running
    running.kill()


def test_top_shows_tenants_pauses_resumes_and_quits(queue: vtrr.Queue, terminal: Terminal) -> None:
    queue.enqueue_many(
        [Item("alice", f"a{i}", b"") for i in range(3)]
        + [Item("bob", f"b{i}", b"") for i in range(2)]
        + [Item("carol", "c0", b"")]
    )
    until(lambda: all(t in terminal.screen() for t in ("alice", "bob", "carol")), "the tenants")
    screen = terminal.screen()
    assert "queued 6" in screen and "by queued" in screen, screen
    # Ranked by queued: alice, bob, carol. Down selects bob.
    terminal.keys("Down")
    time.sleep(0.3)  # a refresh in between must keep bob selected
    terminal.keys("p")
    until(lambda: queue.partition("bob").paused, "bob paused")
    assert not queue.partition("alice").paused
    until(lambda: "paused bob" in terminal.screen(), "the line saying so")
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
    queue: vtrr.Queue, terminal: Terminal
) -> None:
    # alice: one token a minute, spent on the lease below: none left, the next due in ~60 s.
    queue.set_limit("alice", rate=vtrr.Rate(1, 60_000))
    queue.enqueue_many(Item("alice", f"a{i}", b"") for i in range(3))
    lease = queue.lease(60_000)
    assert lease is not None and lease.id == "a0" and queue.lease(60_000) is None
    # bob: a full bucket of 8 (its burst); carol: no rate.
    queue.set_limit("bob", rate=vtrr.Rate(5, 1000, burst=8))
    queue.enqueue_many([Item("bob", "b0", b""), Item("carol", "c0", b"")])
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
