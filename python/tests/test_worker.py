"""Worker: leases, renewals, fenced ACK/NACK with backoff, lost leases, shutdown, crashes."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.backoff
import redis.retry
from servers import Server

import vtrr
from vtrr import Backoff, Hooks, Item, Job, Worker
from vtrr.exchange import Exchange, Exchanged, commands_of, read
from vtrr.limits import MAX_REASON_BYTES
from vtrr.worker import _Dispatch, failure_reason

HERE = Path(__file__).resolve().parent


def done_list(client: redis.Redis, name: str) -> list[str]:
    return [entry.decode() for entry in client.lrange(f"done:{name}", 0, -1)]


def wait_for(condition: object, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_every_item_runs_once_across_concurrent_handlers(
    queue: vtrr.Queue, client: redis.Redis
) -> None:
    queue.enqueue_many(Item(f"p{i % 7}", f"item-{i}", b"x") for i in range(200))
    seen: list[str] = []
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            seen.append(job.id)

    leased: list[str] = []
    succeeded: list[float] = []
    hooks = Hooks(
        leased=lambda job: leased.append(job.id), succeeded=lambda job, s: succeeded.append(s)
    )
    Worker(queue, handler, concurrency=4, block_ms=100, exit_when_idle=True, hooks=hooks).run()
    assert sorted(seen) == sorted(f"item-{i}" for i in range(200))
    assert sorted(leased) == sorted(seen) and len(succeeded) == 200 and min(succeeded) >= 0
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (0, 0)
    assert queue.check() == []


def test_one_worker_serves_partitions_in_turn(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item("heavy", f"h{i}", b"x") for i in range(30))
    queue.enqueue_many(
        Item(light, f"{light}-{i}", b"x") for light in ("l1", "l2") for i in range(3)
    )
    order: list[str] = []
    Worker(queue, lambda job: order.append(job.id), block_ms=100, exit_when_idle=True).run()
    assert len(order) == 36
    light_positions = [n for n, item in enumerate(order, 1) if item.startswith("l")]
    assert max(light_positions) <= 12, order


def test_a_high_priority_item_overtakes_a_ten_thousand_item_backlog(queue: vtrr.Queue) -> None:
    for chunk in range(10):
        queue.enqueue_many(Item("big", f"b{chunk}-{i:04}", b"x") for i in range(1000))
    order: list[str] = []
    worker: Worker

    def handler(job: Job) -> None:
        order.append(job.id)
        if len(order) == 100:
            # Mid-backlog: 9,900 items are still queued ahead of it by time.
            queue.enqueue("small", "urgent", b"u", priority=50)
            queue.enqueue("small", "whenever", b"w", priority=-1)
        if len(order) == 10_002:
            worker.stop()

    worker = Worker(queue, handler, concurrency=2, block_ms=100)
    worker.run()
    # Served among the next few leases: what the worker had in hand or was
    # leasing came before it (a round trip leases up to twice the
    # concurrency, slots settling included, and one may be in flight), out
    # of 9,900 items queued ahead of it by time.
    assert 100 <= order.index("urgent") <= 100 + 4 * 2 * 2, order.index("urgent")
    # Leased after the whole backlog: finished among the last two handlers'.
    assert order.index("whenever") >= len(order) - 2, order[-5:]
    assert queue.check() == []


def test_a_tenant_whose_jobs_cost_ten_times_their_weight_gets_a_tenth_of_the_service(
    queue: vtrr.Queue,
) -> None:
    # Both tenants declare weight 1; the heavy one's handler reports 10.
    queue.enqueue_many(Item("heavy", f"h{i:04}", b"x") for i in range(300))
    queue.enqueue_many(Item("light", f"l{i:04}", b"x") for i in range(300))
    served = {"heavy": 0, "light": 0}
    worker: Worker

    def handler(job: Job) -> None:
        tenant = "heavy" if job.id.startswith("h") else "light"
        job.cost = 10 if tenant == "heavy" else 1
        served[tenant] += 1
        if served["light"] == 200:
            worker.stop()

    worker = Worker(queue, handler, block_ms=100, cost="time")
    worker.run()
    # Equal weights alone would serve them alike (200 each).
    ratio = served["light"] / served["heavy"]
    assert 8 <= ratio <= 12, served
    assert queue.check() == []


def test_a_throttled_tenant_is_served_at_its_rate_while_others_run_at_full_speed(
    queue: vtrr.Queue,
) -> None:
    queue.set_limit("slow", rate=vtrr.Rate(amount=10, per_ms=1000, burst=2))
    queue.enqueue_many(Item("slow", f"s{i:03}", b"x") for i in range(200))
    queue.enqueue_many(Item("fast", f"f{i:05}", b"x") for i in range(20_000))
    served = {"slow": 0, "fast": 0}
    worker: Worker

    def handler(job: Job) -> None:
        served["slow" if job.id.startswith("s") else "fast"] += 1
        if served["slow"] >= 12:
            worker.stop()

    # Until the slow tenant had 12 items: its burst of 2, then 10 a second.
    worker = Worker(queue, handler, concurrency=4, block_ms=100)
    started = time.monotonic()
    worker.run()
    elapsed = time.monotonic() - started
    # No faster, however fast the worker; and not a fifth as fast (that takes
    # 5 s, not 1: a loaded machine delays leases, it does not drop four in five).
    assert served["slow"] <= 2 + 10 * elapsed + 1, (served, elapsed)
    assert elapsed < 5, ("served far below its rate", served, elapsed)
    # The other tenant takes every turn left.
    assert served["fast"] > 20 * served["slow"], served
    assert queue.partition("slow").held > 0, "its backlog waits in held, not leased"
    assert queue.check() == []


def test_cost_time_charges_a_long_job_as_it_runs_by_its_renewals(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item("long", f"l{i}", b"x") for i in range(3))
    seen: list[float] = []

    def handler(job: Job) -> None:
        if job.id != "l0":
            return
        # Renewed every 200 ms, each charging the run time since the last: it
        # runs until they charged 300 ms (a minute at most).
        before = queue.partition("long").virtual_time
        assert before is not None
        deadline = time.monotonic() + 60
        while (after := queue.partition("long").virtual_time or before) - before < 300:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        seen.extend([after - before, (time.monotonic() - job.started) * 1000])
        print(f"\ncharged {after - before} of {seen[-1]:.0f} ms while it ran")

    Worker(queue, handler, lease_ms=600, block_ms=100, cost="time", exit_when_idle=True).run()
    assert seen, "its renewals charged nothing while it ran"
    charged, ran_ms = seen
    assert charged <= ran_ms + 1, ("charged its run time so far, no more", seen)
    assert queue.check() == []


def test_cost_time_reports_each_jobs_run_time_in_milliseconds(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item("slow", f"s{i}", b"x") for i in range(40))
    queue.enqueue_many(Item("quick", f"q{i}", b"x") for i in range(40))
    order: list[str] = []

    def handler(job: Job) -> None:
        order.append(job.id)
        if job.id.startswith("s"):
            time.sleep(0.03)

    Worker(queue, handler, block_ms=100, cost="time", exit_when_idle=True).run()
    # A 30 ms job charges its tenant about 30 turns: the quick tenant's
    # 40 items are all served before the slow one's tenth.
    slow_before_quick_done = [item for item in order[: order.index("q39")] if item.startswith("s")]
    assert len(slow_before_quick_done) <= 6, order
    assert sorted(order) == sorted([f"s{i}" for i in range(40)] + [f"q{i}" for i in range(40)])
    assert queue.check() == []


def test_a_failing_handler_is_nacked_with_backoff_until_the_policy_dead_letters_it(
    queue: vtrr.Queue,
) -> None:
    queue.set_policy(max_nacks=3)
    queue.enqueue("p", "bad", b"x")
    attempts: list[tuple[float, int]] = []
    failures: list[int | None] = []

    def handler(job: Job) -> None:
        attempts.append((time.monotonic(), job.nacks))
        raise RuntimeError("always fails")

    worker = Worker(
        queue, handler, block_ms=50, backoff=Backoff(base_ms=40, jitter=0.0),
        hooks=Hooks(failed=lambda job, error, delay: failures.append(delay)),
    )  # fmt: skip
    thread = run_in_thread(worker)
    wait_for(lambda: queue.stats().dead == 1, what="the item dead-lettered")
    worker.stop()
    thread.join(5)
    assert [nacks for _, nacks in attempts] == [0, 1, 2, 3]
    assert failures == [40, 80, 160, None], (
        "the 4th failure passes MAX-NACKS 3: the queue dead-letters it, and the hook hears so"
    )
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(attempts)]
    for gap, delay in zip(gaps, (0.040, 0.080, 0.160), strict=True):
        assert gap >= delay, f"retried after {gap:.3f} s, before its {delay} s backoff"
    [dead] = queue.dead()
    assert (dead.id, dead.reason, dead.nacks) == ("bad", "max-nacks", 4)


def test_backoff_doubles_caps_and_jitters() -> None:
    backoff = Backoff(base_ms=100, max_ms=1_000, jitter=0.5)
    rng = random.Random(7)
    for nacks, full in ((0, 100), (1, 200), (3, 800), (4, 1_000), (40, 1_000)):
        draws = {backoff.delay_ms(nacks, rng) for _ in range(50)}
        assert all(full // 2 <= d <= full for d in draws), (nacks, draws)
        assert len(draws) > 1, "jitter spreads the delays"
    with pytest.raises(ValueError):
        Backoff(base_ms=10, max_ms=5)


def test_retry_and_dead_letter_from_the_handler(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "retry-me", b"x")
    queue.enqueue("p", "poison", b"x")
    runs: list[tuple[str, int]] = []

    def handler(job: Job) -> None:
        runs.append((job.id, job.nacks))
        if job.id == "poison":
            raise vtrr.DeadLetter("cannot parse")
        if job.nacks == 0:
            raise vtrr.Retry(delay_ms=30)

    worker = Worker(queue, handler, block_ms=50)
    thread = run_in_thread(worker)
    wait_for(
        lambda: ("retry-me", 1) in runs and queue.stats().dead == 1, what="retry and dead letter"
    )
    worker.stop()
    thread.join(5)
    assert [dead.reason for dead in queue.dead()] == ["nack"]
    assert queue.stats().queued == queue.stats().inflight == 0


def test_a_running_handler_keeps_its_lease_renewed(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "slow", b"x")
    runs: list[tuple[int, bool]] = []

    def handler(job: Job) -> None:
        time.sleep(2.0)  # more than three leases
        runs.append((job.timeouts, job.lost.is_set()))

    Worker(queue, handler, lease_ms=600, block_ms=50, exit_when_idle=True).run()
    assert runs == [(0, False)], "never reclaimed while it ran"
    assert queue.stats().inflight == 0


def test_a_lost_lease_is_reported_and_never_settled(
    queue: vtrr.Queue, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease expires mid-run and the item goes to another worker: this one must keep off it."""
    queue.enqueue("p", "doomed", b"x")
    lost: list[str] = []
    other = vtrr.Queue(server.client(), queue.name)
    taken_over: list[vtrr.Lease] = []
    ran: list[Job] = []
    # What the worker sends: its round trips are all its dealings with the
    # queue. Its ACKs ride on a LEASE (... ACK), so the server's count of
    # VTRR.ACK calls would not see one.
    sent: list[Exchange] = []
    exchange = vtrr.Queue.exchange

    def recorded(self: vtrr.Queue, round_trip: Exchange) -> Exchanged:
        sent.append(round_trip)
        return exchange(self, round_trip)

    monkeypatch.setattr(vtrr.Queue, "exchange", recorded)

    def handler(job: Job) -> None:
        ran.append(job)
        # Another client shortens this lease to 1 ms, takes the item back and
        # leases it: the item now belongs to a newer delivery. The worker's own
        # renewal may lengthen it again in between (same token): then again.
        newer = None
        deadline = time.monotonic() + 30
        while newer is None:
            assert time.monotonic() < deadline, "the item was never taken over"
            other.renew(job.lease, 1)
            time.sleep(0.01)
            other.reclaim()
            newer = other.lease(60_000)
        assert newer.id == "doomed" and newer.timeouts == 1
        taken_over.append(newer)
        assert job.lost.wait(30), "the worker's RENEW replied 0 and set job.lost"

    worker = Worker(queue, handler, lease_ms=150, block_ms=50, exit_when_idle=True,
                    hooks=Hooks(lost=lambda job: lost.append(job.id)))  # fmt: skip
    worker.run()
    assert lost == ["doomed"] and len(taken_over) == 1
    [job] = ran
    settled = [fenced for each in sent for fenced in (*each.acks, *(g.lease for g in each.nacks))]
    assert (job.id, job.token) not in {(fenced.id, fenced.token) for fenced in settled}, (
        "the worker sent no ACK or NACK for it",
        settled,
    )
    assert other.ack(taken_over[0]) == 1, "the newer delivery still holds the item"


def test_worker_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="delay_ms"):
        vtrr.Retry(delay_ms=-5)
    with pytest.raises(ValueError, match="max_ms"):
        Backoff(max_ms=10**13)
    with pytest.raises(TypeError, match="block_ms"):
        Worker(vtrr.Queue(redis.Redis(), "q"), lambda job: None, block_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block_ms"):
        Worker(vtrr.Queue(redis.Redis(), "q"), lambda job: None, block_ms=0)
    with pytest.raises(ValueError, match="cost"):
        Worker(vtrr.Queue(redis.Redis(), "q"), lambda job: None, cost="tokens")  # type: ignore[arg-type]


def test_a_lease_that_arrives_after_shutdown_goes_back_unrun(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "long", b"x")
    seen: list[str] = []

    def handler(job: Job) -> None:
        seen.append(job.id)
        time.sleep(5)

    # Two handler threads: one runs "long", the other waits in LEASE ... BLOCK.
    worker = Worker(
        queue, handler, concurrency=2, lease_ms=60_000, block_ms=3000, grace_seconds=0.2
    )
    thread = run_in_thread(worker)
    wait_for(lambda: seen == ["long"], what="the first lease")
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    # "long" went back by NACK; the waiting thread's LEASE may take it (or a
    # new item) after run() returned: it must give that back too, unrun.
    queue.enqueue("p", "late", b"x")
    # Given back, not expired: the leases last a minute.
    wait_for(lambda: queue.stats().inflight == 0 and queue.stats().queued == 2, timeout=30,
             what="everything back in the queue")  # fmt: skip
    assert seen == ["long"]


def test_one_lease_tracked_twice_is_renewed_until_both_let_go(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "i", b"x")
    lease = queue.lease(60_000)
    assert lease is not None
    renewed: list[bool] = []

    class Recorded:
        def renew(self, lease: vtrr.Lease, lease_ms: int) -> bool:
            renewed.append(queue.renew(lease, lease_ms))
            return renewed[-1]

    # Its thread's first pass is 20 s away: the test makes the passes itself,
    # so what they renew does not depend on when a loaded machine runs them.
    heartbeat = vtrr.Heartbeat(Recorded(), 60_000)
    first, second = heartbeat.track(lease), heartbeat.track(lease)
    assert first is second
    heartbeat.untrack(lease)  # one of two holders lets go: still renewed
    heartbeat.renew_all()
    assert renewed == [True] and not first.is_set()
    heartbeat.untrack(lease)  # the other too: no longer
    heartbeat.renew_all()
    assert renewed == [True]
    heartbeat.stop()
    assert queue.ack(lease) == 1


def test_a_heartbeat_pass_stops_at_the_first_unreachable_renew(
    queue: vtrr.Queue, make_server: Callable[..., Server]
) -> None:
    """A node gone: one failed RENEW per pass, not one per lease (each after the client's retries)."""
    doomed = make_server()
    client = redis.Redis(
        host="127.0.0.1", port=doomed.port, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    )
    gone = vtrr.Queue(client, queue.name)
    gone.enqueue_many(Item("p", f"i{n}", b"x") for n in range(5))
    leases = gone.lease_many(60_000, 5)
    sent: list[str] = []
    renew = gone.renew

    def counted(lease: vtrr.Lease, lease_ms: int) -> bool:
        sent.append(lease.id)
        return renew(lease, lease_ms)

    gone.renew = counted  # type: ignore[method-assign]
    heartbeat = vtrr.Heartbeat(gone, 60_000)
    events = [heartbeat.track(lease) for lease in leases]
    heartbeat.renew_all()
    assert len(sent) == 5
    doomed.stop()
    heartbeat.renew_all()
    assert len(sent) == 6, "the pass stopped after the first failed RENEW"
    heartbeat.renew_all()
    assert len(sent) == 7, "the next pass asked again"
    assert not any(event.is_set() for event in events), "an unreachable node is not a lost lease"
    for lease in leases:
        heartbeat.untrack(lease)
    heartbeat.stop()
    client.close()


def test_an_async_handler_runs_as_tasks_over_an_async_queue(
    server: Server, queue_name: str
) -> None:
    async def scenario() -> list[str]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        queue = vtrr.AsyncQueue(client, queue_name)
        await queue.enqueue_many(Item(f"p{i % 3}", f"a{i}", b"x") for i in range(20))
        seen: list[str] = []

        async def handler(job: Job) -> None:
            await asyncio.sleep(0.01)
            seen.append(job.id)

        await Worker(queue, handler, concurrency=5, block_ms=50, exit_when_idle=True).run_async()
        assert (await queue.stats()).inflight == 0
        await client.aclose()
        return seen

    assert sorted(asyncio.run(scenario())) == sorted(f"a{i}" for i in range(20))


def test_handler_kind_must_match_the_queue_kind(queue: vtrr.Queue) -> None:
    async def handler(job: Job) -> None:
        return None

    with pytest.raises(TypeError, match="AsyncQueue"):
        Worker(queue, handler)


@pytest.fixture
def spawn_worker(server: Server) -> Iterator[object]:
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(queue_name: str, *extra: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "VTRR_URL": server.url, "PYTHONPATH": str(HERE)}
        command = [sys.executable, "-m", "vtrr.cli", "--url", server.url, "worker", "jobs:record",
                   "--queue", queue_name, "--block-ms", "100", *extra]  # fmt: skip
        processes.append(subprocess.Popen(command, env=env, cwd=HERE))
        return processes[-1]

    yield spawn
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_sigterm_lets_a_running_handler_finish_and_ack(
    queue: vtrr.Queue, client: redis.Redis, spawn_worker
) -> None:  # type: ignore[no-untyped-def]
    queue.enqueue("p", "finishing", b"sleep:0.8")
    process = spawn_worker(queue.name, "--grace-seconds", "10")
    wait_for(lambda: queue.stats().inflight == 1, what="the lease")
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    assert done_list(client, queue.name) == ["finishing:0:0"]
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (0, 0)


def test_sigterm_past_the_grace_gives_the_item_back(
    queue: vtrr.Queue, client: redis.Redis, spawn_worker
) -> None:  # type: ignore[no-untyped-def]
    queue.enqueue("p", "too-long", b"sleep:30")
    queue.enqueue("p", "next", b"x")
    process = spawn_worker(queue.name, "--grace-seconds", "0.3", "--lease-ms", "60000")
    wait_for(lambda: queue.stats().inflight == 1, what="the lease")
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0
    assert time.monotonic() - started < 20, "shutdown waits the grace, not the 30 s task"
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (2, 0), "given back at once, not after the 60 s lease"
    leases = {lease.id: lease.nacks for lease in queue.lease_many(1000, 2)}
    assert leases == {"too-long": 0, "next": 0}, "released: a deploy counts no nack"


def test_a_worker_killed_mid_task_loses_nothing(
    queue: vtrr.Queue, client: redis.Redis, spawn_worker
) -> None:  # type: ignore[no-untyped-def]
    queue.enqueue("p", "crasher", b"crash")
    first = spawn_worker(queue.name, "--lease-ms", "500")
    assert first.wait(10) == 17, "the handler killed its process mid-task"
    assert queue.stats().inflight == 1
    second = spawn_worker(queue.name, "--lease-ms", "500", "--exit-when-idle", "--block-ms", "2000")
    assert second.wait(15) == 0
    assert done_list(client, queue.name) == ["crasher:1:0"], (
        "reclaimed by the timer, run again, once"
    )


def test_a_lease_whose_thread_died_is_no_longer_renewed(queue: vtrr.Queue) -> None:
    """A framework thread killed before it settled its lease: the item comes back, as after a crash."""
    queue.enqueue("p", "orphan", b"x")
    lease = queue.lease(400)
    assert lease is not None
    heartbeat = vtrr.Heartbeat(queue, 400)
    holder = threading.Thread(target=heartbeat.track, args=(lease,))  # tracks, then ends
    holder.start()
    holder.join()
    deadline = time.monotonic() + 30
    while (again := queue.lease(60_000, block_ms=1000)) is None:  # reclaimed once it expires
        assert time.monotonic() < deadline, "still renewed, its thread gone"
    heartbeat.stop()
    assert again is not None and (again.id, again.timeouts) == ("orphan", 1)
    assert queue.ack(again) == 1


def test_one_dispatcher_serves_more_handlers_than_the_pool_has_connections(
    server: Server, queue_name: str
) -> None:
    """Handlers never talk to the server: a pool of 2 serves 8 handlers, renewals included."""
    client = redis.Redis(host="127.0.0.1", port=server.port, max_connections=2)
    queue = vtrr.Queue(client, queue_name)
    queue.enqueue_many(Item("p", f"slow-{i}", b"x") for i in range(4))
    runs: list[str] = []

    def handler(job: Job) -> None:
        time.sleep(1.0)  # longer than the lease: only renewals keep it
        runs.append(job.id)

    Worker(queue, handler, concurrency=8, lease_ms=300, block_ms=50, exit_when_idle=True).run()
    assert sorted(runs) == [f"slow-{i}" for i in range(4)], "each ran once, never reclaimed"
    assert queue.stats().expired == 0


def test_a_handler_that_exits_or_is_cancelled_fails_its_job_not_the_worker(
    queue: vtrr.Queue, server: Server, queue_name: str
) -> None:
    queue.enqueue_many([Item("p", "exits", b""), Item("p", "fine", b"")])
    seen: list[tuple[str, int]] = []

    def handler(job: Job) -> None:
        seen.append((job.id, job.nacks))
        if job.id == "exits" and job.nacks == 0:
            sys.exit(3)

    Worker(queue, handler, block_ms=50, backoff=Backoff(base_ms=0), exit_when_idle=True).run()
    assert sorted(seen) == [("exits", 0), ("exits", 1), ("fine", 0)], "retried, not the end"

    async def scenario() -> list[tuple[str, int]]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        async_queue = vtrr.AsyncQueue(client, queue_name + "async")
        await async_queue.enqueue_many([Item("p", "cancels", b""), Item("p", "fine", b"")])
        ran: list[tuple[str, int]] = []

        async def handler(job: Job) -> None:
            ran.append((job.id, job.nacks))
            if job.id == "cancels" and job.nacks == 0:
                raise asyncio.CancelledError

        await Worker(
            async_queue, handler, block_ms=50, backoff=Backoff(base_ms=0), exit_when_idle=True
        ).run_async()
        assert (await async_queue.stats()).inflight == 0
        await client.aclose()
        return ran

    assert sorted(asyncio.run(scenario())) == [("cancels", 0), ("cancels", 1), ("fine", 0)]


def test_a_permanent_error_stops_the_worker_and_an_unreachable_server_is_logged_once(
    make_server, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    bare = make_server(with_module=False)
    worker = Worker(vtrr.Queue(bare.client(), "q"), lambda job: None, block_ms=50)
    with pytest.raises(vtrr.ModuleNotLoaded):
        worker.run()

    port = bare.port
    bare.stop()
    no_retries = redis.retry.Retry(redis.backoff.NoBackoff(), 0)  # redis-py's own would take 10 s
    client = redis.Redis(host="127.0.0.1", port=port, retry=no_retries)
    unreachable = Worker(vtrr.Queue(client, "q"), lambda job: None, block_ms=50)
    thread = run_in_thread(unreachable)
    with caplog.at_level("WARNING", logger="vtrr.worker"):
        wait_for(lambda: any(r.levelname == "ERROR" for r in caplog.records), timeout=20,
                 what="the first error line")  # fmt: skip
        time.sleep(1.5)  # more failed round trips, no more lines
        unreachable.stop()
        thread.join(10)
    assert not thread.is_alive()
    errors = [record for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 1, [record.getMessage() for record in errors]


def test_shutdown_gives_back_unrun_by_release_at_every_deploy(queue: vtrr.Queue) -> None:
    """Cut off by shutdown again and again, a job is never dead-lettered for it."""
    queue.set_policy(max_nacks=0)
    queue.enqueue("p", "long", b"")
    started = threading.Event()

    def handler(job: Job) -> None:
        started.set()
        job.cancelled.wait(5)

    for _ in range(3):
        started.clear()
        worker = Worker(queue, handler, block_ms=50, grace_seconds=0.1)
        thread = run_in_thread(worker)
        assert started.wait(5)
        worker.stop()
        thread.join(5)
    assert queue.stats().dead == 0
    lease = queue.lease(1000)
    assert lease is not None and lease.nacks == 0


def test_a_renewal_not_asked_keeps_the_job_and_a_refused_one_stops_it(queue: vtrr.Queue) -> None:
    # A sharded queue answers a RENEW it could not send (its node out of
    # reach) with None: the lease may still stand, so the job runs on and
    # the next renewal asks again. A RENEW the server refused (False) stops it.
    queue.enqueue_many([Item("t", "a", b""), Item("t", "b", b"")])
    leases = [queue.lease(60_000) or pytest.fail() for _ in range(2)]
    dispatch = _Dispatch(Worker(queue, lambda job: None), wake=lambda: None)
    kept, stopped = (Job(lease, queue.name) for lease in leases)
    for job in (kept, stopped):
        dispatch.running[(job.lease.id, job.lease.token)] = job
    sent = Exchange(60_000, renews=(kept.lease, stopped.lease))
    dispatch.absorb(sent, Exchanged((), (), (None, False), []), time.monotonic())
    assert not kept.should_stop()
    assert stopped.lost.is_set()


class WorkerProcess:
    """`vtrr worker` (the console script) in a process of its own, its log lines read as they come."""

    def __init__(self, server: Server, *args: str) -> None:
        command = [str(Path(sys.executable).parent / "vtrr"), "worker", *args, "--url", server.url]
        env = {**os.environ, "VTRR_URL": server.url}
        self.process = subprocess.Popen(
            command, env=env, cwd=HERE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for_line(self, text: str) -> None:
        wait_for(lambda: self.said(text), what=f"the line {text!r}; got {self.lines}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def worker_processes() -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(server: Server, *args: str) -> WorkerProcess:
        started.append(WorkerProcess(server, *args))
        return started[-1]

    yield start
    for each in started:
        each.kill()


def test_a_second_signal_stops_at_once_and_gives_the_running_items_back(
    server: Server, queue: vtrr.Queue, client: redis.Redis, worker_processes
) -> None:  # type: ignore[no-untyped-def]
    queue.enqueue("p", "too-long", b"sleep:30")
    worker = worker_processes(server, "jobs:record", queue.name, "--grace-seconds", "60",
                              "--lease-ms", "60000", "--block-ms", "100")  # fmt: skip
    wait_for(lambda: queue.stats().inflight == 1, what="the lease")
    worker.process.send_signal(signal.SIGINT)
    worker.wait_for_line("signal SIGINT: stopping (grace 60.0 s; a second signal stops at once)")
    time.sleep(0.3)
    assert worker.process.poll() is None, "the first signal waits for the running job"
    stopping_at = time.monotonic()
    worker.process.send_signal(signal.SIGINT)
    assert worker.process.wait(20) == 0
    assert time.monotonic() - stopping_at < 20, "not the 60 s grace, nor the job's 30 s"
    assert worker.said("signal SIGINT again: stopping now, running jobs go back unrun")
    assert worker.said("stopping: too-long goes back to the queue unrun")
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (1, 0), "given back at once, not at lease expiry"
    lease = queue.lease(1000)
    assert lease is not None and (lease.id, lease.nacks) == ("too-long", 0), "released, uncounted"
    assert done_list(client, queue.name) == []


def test_a_lease_under_way_at_the_first_signal_is_given_back_unrun(
    make_server: Callable[..., Server], queue_name: str, worker_processes
) -> None:  # type: ignore[no-untyped-def]
    server = make_server()  # its own: the one blocked client on it is the worker's
    client = server.client()
    queue = vtrr.Queue(client, queue_name)
    queue.enqueue("p", "first", b"")
    worker = worker_processes(server, "jobs:record", queue_name, "--block-ms", "20000")
    wait_for(lambda: done_list(client, queue_name) == ["first:0:0"], what="the first job")
    # Idle now: its LEASE ... BLOCK waits in the server for the next item.
    wait_for(lambda: client.info("clients")["blocked_clients"] == 1, what="the blocked lease")
    worker.process.send_signal(signal.SIGINT)
    worker.wait_for_line("signal SIGINT: stopping")
    # An item (a retry falling due alike) reaches the lease still waiting.
    queue.enqueue("p", "late", b"")
    assert worker.process.wait(10) == 0
    assert done_list(client, queue_name) == ["first:0:0"], "once stopping, nothing new runs"
    assert worker.said("stopping: late goes back to the queue unrun")
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (1, 0)
    lease = queue.lease(1000)
    assert lease is not None and (lease.id, lease.nacks) == ("late", 0)
    client.close()


# What a failure leaves behind (#43): the log's traceback, the item's last error.


def explode(job: Job) -> None:
    raise RuntimeError(f"boom on {job.id}")


def test_a_failure_is_logged_with_its_traceback_and_partition_and_kept_with_the_item(
    queue: vtrr.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.set_policy(max_nacks=1)
    queue.enqueue("alice", "bad1", b"x")
    worker = Worker(queue, explode, block_ms=50, backoff=Backoff(base_ms=10, jitter=0.0))
    with caplog.at_level("WARNING", logger="vtrr.worker"):
        thread = run_in_thread(worker)
        wait_for(lambda: queue.stats().dead == 1, what="the item dead-lettered")
        worker.stop()
        thread.join(5)
    failed = [r for r in caplog.records if "bad1" in r.getMessage()]
    assert [r.levelname for r in failed] == ["WARNING", "ERROR"]
    line = (
        r"bad1 \(partition alice\) failed after \d+\.\d{3} s \(RuntimeError\('boom on bad1'\)\): "
    )
    assert re.fullmatch(line + "retry in 10 ms", failed[0].getMessage())
    assert re.fullmatch(line + "dead-lettered by the queue's MAX-NACKS", failed[1].getMessage())
    for record in failed:
        assert record.exc_info is not None, "logged with its traceback"
        text = logging.Formatter().format(record)
        assert "Traceback (most recent call last):" in text and "in explode" in text
    [dead] = queue.dead()
    assert (dead.reason, dead.nacks) == ("max-nacks", 2)
    assert dead.last_error is not None
    summary, traceback_text = dead.last_error.split("\n", 1)
    assert summary == "RuntimeError: boom on bad1"
    assert traceback_text.startswith("Traceback (most recent call last):")
    assert "in explode" in traceback_text
    assert traceback_text.endswith("RuntimeError: boom on bad1")


def test_a_reason_keeps_its_summary_and_the_end_of_a_long_traceback() -> None:
    def chain(n: int) -> None:
        try:
            if n == 0:
                raise ValueError("bottom \udcff " + "é" * 3000)
            chain(n - 1)
        except ValueError as error:
            raise ValueError(f"level {n}") from error

    try:
        chain(40)
    except ValueError as error:
        reason = failure_reason(error)
    sent = reason.encode()  # valid UTF-8: the lone surrogate came out as an escape
    assert len(sent) <= MAX_REASON_BYTES
    assert reason.startswith("ValueError: level 40\n...\n"), "the summary, then a gap"
    assert reason.endswith("in chain\n    raise ValueError(f\"level {n}\") from error\n"
                           "ValueError: level 40")  # fmt: skip
    assert "bottom" not in reason, "the first causes gave way"
    # A long line is cut (a character it splits goes); short ones are whole:
    # the summary, then the traceback as Python prints it.
    try:
        raise KeyError("é" * 3000)
    except KeyError as error:
        cut = failure_reason(error)
    assert cut.startswith("KeyError: 'éé") and cut.endswith("éé...")
    assert "\n...\n" not in cut and cut.count("é...") == 2, "its two long lines cut, so it fits"
    try:
        raise KeyError("k")
    except KeyError as error:
        short = failure_reason(error)
        printed = "".join(traceback.format_exception(error)).rstrip()
    assert short.split("\n")[0] == "KeyError: 'k'"
    assert short.split("\n", 1)[1] == printed


def test_a_reason_past_the_bound_is_cut_so_the_server_takes_it(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "huge", b"x")

    def handler(job: Job) -> None:
        raise vtrr.DeadLetter("x" * 100_000)

    worker = Worker(queue, handler, block_ms=50)
    thread = run_in_thread(worker)
    wait_for(lambda: queue.stats().dead == 1, what="the item dead-lettered")
    worker.stop()
    thread.join(5)
    [dead] = queue.dead()
    assert dead.reason == "nack" and dead.last_error is not None
    summary, _ = dead.last_error.split("\n", 1)
    assert summary == "vtrr.worker.DeadLetter: " + "x" * (MAX_REASON_BYTES // 8 - 24) + "..."
    assert "in handler" in dead.last_error and dead.last_error.endswith("xxx...")


def test_a_handlers_return_value_is_its_jobs_result(
    queue: vtrr.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.set_policy(result_ttl_ms=60_000)
    returns: dict[str, object] = {
        "bytes": b"\xff\x00",
        "text": "é",
        "json": {"n": [1, 2.5, None]},
        "none": None,
        "object": object(),
        "too-big": b"x" * 1_048_577,
    }
    queue.enqueue_many(Item(f"p{i}", name, b"x") for i, name in enumerate(returns))
    caplog.set_level(logging.WARNING, logger="vtrr.worker")
    Worker(
        queue, lambda job: returns[job.id], concurrency=3, block_ms=100, exit_when_idle=True
    ).run()
    kept = {name: queue.result(name) for name in returns}
    assert all(status is not None and status.state == "done" for status in kept.values()), kept
    assert {name: status.result for name, status in kept.items() if status} == {
        "bytes": b"\xff\x00",
        "text": "é".encode(),
        "json": b'{"n":[1,2.5,null]}',
        "none": None,
        "object": None,
        "too-big": None,
    }
    unkept = sorted(r.getMessage().split(":")[0] for r in caplog.records if "not kept" in r.message)
    assert unkept == ["object", "too-big"], "each said in the log, and acked all the same"


def test_an_async_handlers_return_value_is_its_jobs_result(server: Server, queue_name: str) -> None:
    async def scenario() -> vtrr.JobStatus | None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        queue = vtrr.AsyncQueue(client, queue_name)
        await queue.set_policy(result_ttl_ms=60_000)
        await queue.enqueue("p", "a", b"21")

        async def handler(job: Job) -> dict[str, int]:
            await asyncio.sleep(0)
            return {"answer": 2 * int(job.payload)}

        await Worker(queue, handler, block_ms=50, exit_when_idle=True).run_async()
        status = await queue.result("a")
        await client.aclose()
        return status

    status = asyncio.run(scenario())
    assert status is not None and status.result == b'{"answer":42}'


def test_a_round_trip_sends_results_beside_the_acks_that_have_none() -> None:
    a, b, c = (vtrr.Lease(name, b"", f"t-{name}", 0, 0) for name in "abc")
    lease = ("VTRR.LEASE", "q", 1000, "WITHCOUNTERS", "WITHPARTITION", "COUNT", 3)

    def sent(**round_trip: Any) -> list[tuple[object, ...]]:
        return [command.args for command in commands_of("q", Exchange(1000, **round_trip))]

    # No result: exactly the round trip of a worker before results.
    assert sent(acks=(a, b), count=3) == [(*lease, "ACK", b"a", "t-a", b"b", "t-b")]
    assert sent(acks=(a, b), count=3, costs=(4, 5)) == [
        (*lease, "ACKCOST", b"a", "t-a", 4, b"b", "t-b", 5)
    ]
    # Every job returned one: the LEASE carries them.
    assert sent(acks=(a, b), count=3, results=(b"1", b"")) == [
        (*lease, "ACKRESULT", b"a", "t-a", b"1", b"b", "t-b", b"")
    ]
    # Some did: theirs go alone, first, so the slots they free are leased.
    assert sent(acks=(a, b, c), count=3, costs=(4, 5, 6), results=(None, b"r", None)) == [
        ("VTRR.ACKRESULT", "q", b"b", "t-b", b"r"),
        (*lease, "ACKCOST", b"a", "t-a", 4, b"c", "t-c", 6),
    ]
    assert sent(acks=(a, b), results=(b"r", None)) == [
        ("VTRR.ACKRESULT", "q", b"a", "t-a", b"r"),
        ("VTRR.ACK", "q", b"b", "t-b"),
    ]
    # The replies go back to the acks in the order given.
    mixed = Exchange(1000, acks=(a, b, c), count=3, results=(None, b"r", None))
    got = read(mixed, [1, vtrr.AckedLeases((False, True), [])])
    assert got.acked == (False, True, True)
