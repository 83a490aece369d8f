"""Recurring schedules: the client's calls against a real server, and runs served by a
real worker process across a `kill -9` of the server and its restart from the AOF."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
from servers import Server, layout

import vtrr

HERE = Path(__file__).resolve().parent
DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_schedule_view_set_again_and_unschedule(queue: vtrr.Queue) -> None:
    before = now_ms()
    next_ms = queue.schedule(
        "tick", every_ms=60_000, partition="ops", payload="hello", weight=3, missed="all"
    )
    assert next_ms % 60_000 == 0 and before < next_ms <= now_ms() + 60_000, "a multiple, ahead"
    assert queue.schedule_view("tick", runs=3) == vtrr.ScheduleView(
        name="tick", every_ms=60_000, cron=None, tz=None, missed="all", partition="ops",
        weight=3, payload=b"hello", next_ms=next_ms,
        runs=[next_ms, next_ms + 60_000, next_ms + 120_000],
    )  # fmt: skip

    nightly = queue.schedule(
        "nightly", cron="30 2 * * *", tz="Europe/Paris", partition="reports", payload=b"\xff\x00"
    )
    view = queue.schedule_view("nightly", runs=2)
    assert view is not None
    assert (view.every_ms, view.cron, view.tz, view.missed) == (
        None,
        "30 2 * * *",
        "Europe/Paris",
        "one",
    )
    assert (view.partition, view.weight, view.payload) == ("reports", 1, b"\xff\x00")
    assert view.next_ms == nightly == view.runs[0] > before
    assert DAY_MS - 3_600_000 <= view.runs[1] - view.runs[0] <= DAY_MS + 3_600_000, view.runs

    # The same timing again keeps the next run and takes the rest of the definition.
    assert queue.schedule("tick", every_ms=60_000, partition="other", payload=b"new") == next_ms
    view = queue.schedule_view("tick")
    assert view is not None
    assert (view.partition, view.payload, view.weight, view.missed) == ("other", b"new", 1, "one")
    assert view.runs == [next_ms], "runs=1 by default"
    # Other timing: the next run by the new one.
    moved = queue.schedule("tick", every_ms=45_000, partition="other", payload=b"new")
    assert moved % 45_000 == 0 and moved > before

    assert sorted(view.name for view in queue.schedules()) == ["nightly", "tick"]
    assert queue.unschedule("tick", "nightly", "absent") == 2
    assert queue.schedule_view("tick") is None
    assert queue.schedules_page() == (0, [])
    with pytest.raises(ValueError, match="at least one"):
        queue.unschedule()


def test_schedules_pages_every_schedule_in_bounded_steps(queue: vtrr.Queue) -> None:
    payload = b"x" * 100  # past a small hash's encoding, which HSCAN reads whole
    for n in range(60):
        queue.schedule(f"s{n}", every_ms=1000 + n, partition=f"p{n % 7}", payload=payload)
    cursor, page = queue.schedules_page(count=10)
    if layout() == "keys":  # HSCAN's steps (the native layout answers this hash whole, today)
        assert cursor != 0 and 0 < len(page) < 60
    seen = {view.name: view for view in queue.schedules(count=20, runs=2)}
    assert set(seen) == {f"s{n}" for n in range(60)}
    assert seen["s7"].every_ms == 1007 and seen["s7"].partition == "p0"
    assert all(len(view.runs) == 2 for view in seen.values())
    with pytest.raises(vtrr.InvalidArgument, match="COUNT must be an integer between 1 and 100"):
        queue.schedules_page(count=101)
    with pytest.raises(vtrr.InvalidArgument, match="RUNS must be an integer between 0 and 20"):
        queue.schedule_view("s1", runs=21)


def test_a_run_is_enqueued_as_schedule_name_colon_due_ms(queue: vtrr.Queue) -> None:
    next_ms = queue.schedule("beat", every_ms=100, partition="p", payload=b"run", weight=2)
    lease = queue.lease(10_000, block_ms=5_000)
    assert lease is not None and lease.payload == b"run"
    prefix, name, due = lease.id.split(":")
    assert (prefix, name) == ("schedule", "beat") and int(due) % 100 == 0 and int(due) >= next_ms
    assert queue.ack(lease) == 1
    assert queue.unschedule("beat") == 1
    assert queue.stats().totals.enqueued >= 1


def test_bad_schedules_raise_and_write_nothing(queue: vtrr.Queue) -> None:
    def schedule(**timing: object) -> int:
        return queue.schedule("bad", partition="p", payload=b"", **timing)  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="every_ms and cron cannot be combined"):
        schedule(every_ms=1000, cron="* * * * *")
    with pytest.raises(ValueError, match="every_ms or cron is required"):
        schedule()
    for timing, says in (
        ({"cron": "every day"}, "CRON is not a valid pattern"),
        ({"cron": "0 0 0 1 1 * 2020"}, "the schedule has no run after now"),
        ({"cron": "0 0 30 2 *"}, "CRON: no run found within 8000 steps; simplify the pattern"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "TZ must be an IANA time zone name"),
        ({"every_ms": 1000, "tz": "UTC"}, "TZ needs CRON"),
        ({"every_ms": 0}, "EVERY must be an integer between 1 and 31536000000"),
        ({"every_ms": 1000, "missed": "some"}, "MISSED must be one of skip, one, all"),
        ({"every_ms": 1000, "weight": 0}, "weight must be an integer between 1 and 1000000000"),
    ):
        with pytest.raises(vtrr.InvalidArgument, match=says):
            schedule(**timing)
    with pytest.raises(vtrr.InvalidArgument, match="schedule must not be empty"):
        queue.schedule("", every_ms=1000, partition="p", payload=b"")
    with pytest.raises(TypeError, match="payload must be bytes or str"):
        queue.schedule("bad", every_ms=1000, partition="p", payload=3)  # type: ignore[arg-type]
    assert queue.schedules_page() == (0, [])


def test_a_definition_another_client_wrote_reads_as_its_name_and_runs(
    queue: vtrr.Queue, client: redis.Redis
) -> None:
    if layout() == "native":
        pytest.skip("the hand-written keys are the keys layout's")
    client.hset(f"vtrr:{queue.name}:schedules", "hand", "not a definition")
    client.zadd(f"vtrr:{queue.name}:schedule_due", {"hand": 4_000_000_000_000})
    assert queue.schedule_view("hand") == vtrr.ScheduleView(
        name="hand", every_ms=None, cron=None, tz=None, missed=None, partition=None,
        weight=None, payload=None, next_ms=4_000_000_000_000, runs=[4_000_000_000_000],
    )  # fmt: skip
    assert [view.name for view in queue.schedules()] == ["hand"]


def test_replies_read_the_same_under_resp2_and_resp3(server: Server, queue_name: str) -> None:
    seen = []
    for protocol in (2, 3):
        queue = vtrr.Queue(server.client(protocol=protocol), f"{queue_name}{protocol}")
        queue.schedule("e", every_ms=3_600_000, partition="p", payload=b"x", missed="skip")
        queue.schedule("c", cron="0 9 * * 1-5", tz="America/New_York", partition="q", payload="y")
        seen.append(sorted(queue.schedules(runs=3), key=lambda view: view.name))
    assert seen[0] == seen[1]
    assert [view.missed for view in seen[0]] == ["one", "skip"]


def test_async_queue_schedules_the_same(server: Server, queue_name: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        queue = vtrr.AsyncQueue(client, queue_name)
        next_ms = await queue.schedule("a", every_ms=60_000, partition="p", payload=b"1")
        await queue.schedule("b", cron="@daily", partition="p", payload=b"2", missed="skip")
        view = await queue.schedule_view("a", runs=2)
        assert view is not None and view.runs == [next_ms, next_ms + 60_000]
        cursor, page = await queue.schedules_page(count=10)
        assert cursor == 0 and sorted(view.name for view in page) == ["a", "b"]
        assert sorted([view.name async for view in queue.schedules()]) == ["a", "b"]
        with pytest.raises(ValueError):
            await queue.schedule("c", partition="p", payload=b"")
        with pytest.raises(vtrr.InvalidArgument, match="TZ must be"):
            await queue.schedule("c", cron="@daily", tz="Nowhere", partition="p", payload=b"")
        assert await queue.unschedule("a", "b") == 2
        assert await queue.schedule_view("a") is None
        await client.aclose()

    asyncio.run(scenario())


# A worker process serving runs while the server is killed and restarted.

PERIOD_MS = 100
DOWN_SECONDS = 1.0
CONCURRENCY = 2


def test_runs_across_a_kill_9_and_an_aof_restart_are_served_once(make_server) -> None:  # type: ignore[no-untyped-def]
    """`missed="all"` catches up every run of the downtime, `"skip"` fires none of
    them, and no run reaches the handler twice.

    A run that reaches it again is only a redelivery (its lease out at the
    kill, its ACK lost): it comes back with a timeout or a nack counted. A run
    fired twice would come fresh (no timeout, no nack) with the same id.
    """
    server = make_server(
        "reclaim-interval-ms", "50",
        extra=("--appendonly", "yes", "--appendfsync", "always"),
    )  # fmt: skip
    name = "{scheduled}"
    queue = vtrr.Queue(server.client(), name)
    queue.schedule("all", every_ms=PERIOD_MS, partition="a", payload=b"", missed="all")
    queue.schedule("skip", every_ms=PERIOD_MS, partition="s", payload=b"", missed="skip")
    env = {**os.environ, "VTRR_URL": server.url, "PYTHONPATH": str(HERE)}
    command = [sys.executable, "-m", "vtrr.cli", "--url", server.url, "worker", "jobs:record",
               "--queue", name, "--concurrency", str(CONCURRENCY), "--lease-ms", "1000",
               "--block-ms", "100"]  # fmt: skip
    worker = subprocess.Popen(command, env=env, cwd=HERE, stderr=subprocess.DEVNULL)

    def runs() -> list[tuple[str, int, int, int]]:
        """(schedule, due ms, timeouts, nacks) of each run the handler saw, in order."""
        seen = []
        for entry in server.client().lrange(f"done:{name}", 0, -1):
            job_id, timeouts, nacks = entry.decode().rsplit(":", 2)
            _, schedule, due = job_id.split(":")
            seen.append((schedule, int(due), int(timeouts), int(nacks)))
        return seen

    def wait_for_runs(after_ms: int, what: str) -> None:
        deadline = time.monotonic() + 30
        while {s for s, due, _, _ in runs() if due >= after_ms} != {"all", "skip"}:
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, f"no runs of both schedules {what}"
            time.sleep(0.05)

    try:
        wait_for_runs(now_ms() + 5 * PERIOD_MS, "before the kill")
        killed_ms = now_ms()
        server.kill()
        time.sleep(DOWN_SECONDS)
        restarted_ms = now_ms()
        server.start()
        wait_for_runs(restarted_ms + 5 * PERIOD_MS, "after the restart")
        queue = vtrr.Queue(server.client(), name)
        assert queue.unschedule("all", "skip") == 2
        deadline = time.monotonic() + 30
        while (stats := queue.stats()).queued + stats.inflight + stats.delayed:
            assert time.monotonic() < deadline, f"never drained: {stats}"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    seen = runs()
    fresh = collections.Counter(
        (s, due) for s, due, timeouts, nacks in seen if not timeouts + nacks
    )
    assert [run for run, times in fresh.items() if times > 1] == [], "a run fired twice"
    # Redelivered: at most the leases out at the kill (the worker holds one per handler).
    back = [(s, due, t, n) for s, due, t, n in seen if t + n]
    assert len(back) <= CONCURRENCY, f"more redeliveries than leases out at the kill: {back}"
    again = len(seen) - len({(s, due) for s, due, _, _ in seen})

    every = sorted({due for s, due, _, _ in seen if s == "all"})
    assert every == list(range(every[0], every[-1] + PERIOD_MS, PERIOD_MS)), "a run is missing"
    assert every[0] < killed_ms and every[-1] > restarted_ms, "the runs span the downtime"
    skipped = sorted({due for s, due, _, _ in seen if s == "skip"})
    inside = [due for due in skipped if killed_ms + PERIOD_MS < due < restarted_ms - PERIOD_MS]
    assert inside == [], f"MISSED skip fired runs of the downtime: {inside}"
    assert skipped[0] < killed_ms and skipped[-1] > restarted_ms
    assert queue.check() == []
    print(
        f"{len(every)} runs of `all`, {len(skipped)} of `skip`, {again} redelivered;"
        f" down {restarted_ms - killed_ms} ms"
    )
