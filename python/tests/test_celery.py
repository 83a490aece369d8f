"""vtrr.celery against real parts: redis-server with the module, `celery worker` processes.

The module's queue lives in DB 0 of the session server, the Celery broker
in DB 1 of the same server. Each test has its own queue name and Celery
queue; the project is tests/celery_project (its `job` records every run in
the list `done:<queue>`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, Task
from celery_project import project
from servers import Server, layout

import vtrr
from vtrr.celery import ALLOWED_TASK_OPTIONS, VTRRQueue, encode_payload

TESTS = Path(__file__).resolve().parent


class Setup:
    """One test's names and URLs, its producer (the test process's VTRRQueue), its workers."""

    def __init__(self, server: Server, name: str, **options: Any) -> None:
        self.server = server
        self.name = name
        self.celery_queue = "celery-" + uuid.uuid4().hex[:10]
        self.redis_url = f"redis://127.0.0.1:{server.port}/0"
        self.broker_url = f"redis://127.0.0.1:{server.port}/1"
        self.options = options
        self.app, self.vtrr, self.task = project.build(
            redis_url=self.redis_url,
            broker_url=self.broker_url,
            name=name,
            celery_queue=self.celery_queue,
            **options,
        )
        self.client = server.client()
        self.broker = redis.Redis.from_url(self.broker_url)
        self.queue = vtrr.Queue(self.client, name)
        self.logs: list[Path] = []

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "VTRR_TEST_REDIS_URL": self.redis_url,
            "VTRR_TEST_BROKER_URL": self.broker_url,
            "VTRR_TEST_QUEUE": self.name,
            "VTRR_TEST_CELERY_QUEUE": self.celery_queue,
            "VTRR_TEST_LEASE_SECONDS": str(self.options.get("lease_seconds", 30)),
        }
        if self.options.get("reclaim_interval") is not None:
            env["VTRR_TEST_RECLAIM_INTERVAL"] = str(self.options["reclaim_interval"])
        return env

    @contextmanager
    def worker(
        self, pool: str = "solo", concurrency: int = 1, beat: bool = False
    ) -> Iterator[subprocess.Popen[bytes]]:
        """A real `celery worker` on this test's Celery queue; killed (its group) at the end."""
        tmp = Path(tempfile.mkdtemp(prefix="vtrr-celery-"))
        log = tmp / "worker.log"
        self.logs.append(log)
        command = [
            sys.executable, "-m", "celery", "-A", "celery_project.worker", "worker",
            "-Q", self.celery_queue, f"--pool={pool}", "-c", str(concurrency),
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-l", "INFO", "--logfile", str(log), "-n", f"w{uuid.uuid4().hex[:6]}@%h",
        ]  # fmt: skip
        if beat:
            # The in-memory scheduler: the default keeps its schedule in a
            # dbm file, which sqlite-backed dbm (Python 3.13) refused under
            # load here ("locking protocol"); a test needs no persistence.
            command += ["-B", "--scheduler", "celery.beat:Scheduler"]
        process = subprocess.Popen(
            command,
            cwd=TESTS,
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "stderr.log", "wb"),  # noqa: SIM115 - closed with the process
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def close(self) -> None:
        for log in self.logs:
            shutil.rmtree(log.parent, ignore_errors=True)
        self.client.close()
        self.broker.close()

    def log_text(self) -> str:
        texts = []
        for log in self.logs:
            for path in (log, log.with_name("stderr.log")):
                if path.exists():
                    texts.append(f"--- {path}\n{path.read_text(errors='replace')}")
        return "\n".join(texts)

    def runs(self, kind: str = "done") -> list[dict[str, Any]]:
        return [json.loads(entry) for entry in self.client.lrange(f"{kind}:{self.name}", 0, -1)]

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}; runs {self.runs()}\n{self.log_text()}"
                )
            time.sleep(0.05)

    def wait_runs(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        self.wait(lambda: len(self.runs()) >= count, f"{count} runs", timeout)
        return self.runs()

    def wait_drained(self, timeout: float = 10.0) -> None:
        def drained() -> bool:
            stats = self.queue.stats()
            return stats.inflight == 0 and stats.queued == 0

        self.wait(drained, "the queue to drain", timeout)

    def triggers_in_broker(self) -> int:
        return self.vtrr.triggers.waiting()

    def idle(self) -> bool:
        """No worker of this test's Celery queue runs or holds a message (`celery inspect`)."""
        inspect = self.app.control.inspect(timeout=1.0)
        active, reserved = inspect.active() or {}, inspect.reserved() or {}
        return bool(active) and not any(active.values()) and not any(reserved.values())


@pytest.fixture
def harness(server: Server, queue_name: str) -> Iterator[Callable[..., Setup]]:
    made: list[Setup] = []

    def make(**options: Any) -> Setup:
        made.append(
            Setup(server, queue_name if not made else queue_name + str(len(made)), **options)
        )
        return made[-1]

    yield make
    for each in made:
        each.close()


def test_queued_tasks_run_once_each_bound_with_their_args(harness: Callable[..., Setup]) -> None:
    s = harness()
    ids = s.task.queue(
        partition_key="alice",
        tasks=[
            {"args": ["a1"], "kwargs": {"n": 1}, "id": "a1"},
            {"args": ["a2", "record", "extra"], "kwargs": {"n": 2}, "weight": 3},
            {"args": ["a3"]},
        ],
    )
    ids += s.task.queue(
        partition_key="bob", tasks=[{"args": ["b1"], "kwargs": {"deep": {"x": [1, 2]}}}]
    )
    assert ids[0] == "a1" and len(set(ids)) == 4
    assert s.queue.stats().queued == 4
    assert s.triggers_in_broker() == 4, "min(max_concurrency 4 - 0, 3), then min(4 - 3, 1)"
    with s.worker():
        runs = s.wait_runs(4)
        s.wait_drained()
    assert sorted(run["id"] for run in runs) == ["a1", "a2", "a3", "b1"], "each ran once"
    by_id = {run["id"]: run for run in runs}
    assert by_id["a2"]["rest"] == ["extra"] and by_id["a2"]["kwargs"] == {"n": 2}
    assert by_id["b1"]["kwargs"] == {"deep": {"x": [1, 2]}}
    assert by_id["a1"]["item"] == "a1"
    for run in runs:
        assert run["bound"] and run["task"] == "celery_project.project.job"
        assert (run["timeouts"], run["nacks"], run["retries"], run["lost"]) == (0, 0, 0, False)
    stats = s.queue.stats()
    assert (stats.inflight, stats.queued, stats.dead) == (0, 0, 0)
    assert s.queue.check() == []


def test_light_partitions_are_served_between_a_heavy_partitions_tasks(
    harness: Callable[..., Setup],
) -> None:
    s = harness()
    s.task.queue("heavy", [{"args": [f"h{i}"]} for i in range(30)])
    s.task.queue("light-1", [{"args": [f"l1-{i}"]} for i in range(3)])
    s.task.queue("light-2", [{"args": [f"l2-{i}"]} for i in range(3)])
    # Only max_concurrency triggers exist: each run sends the next (the chain).
    assert s.triggers_in_broker() == 4
    with s.worker(pool="solo", concurrency=1):
        runs = s.wait_runs(36, timeout=30)
        s.wait_drained()
    order = [run["id"] for run in runs]
    assert len(order) == 36 and len(set(order)) == 36
    light_positions = [i for i, job_id in enumerate(order) if job_id.startswith("l")]
    assert len(light_positions) == 6
    assert max(light_positions) < 12, f"a light task waited behind the heavy backlog: {order}"
    assert s.queue.check() == []


def test_items_enqueued_by_vtrr_queue_0_1_0_run_here(harness: Callable[..., Setup]) -> None:
    """vtrr-queue 0.1.0 from PyPI (its Lua scripts) enqueues; this package's worker runs them.

    Its enqueue writes a keys-layout queue even on a server whose default is
    native (the script creates the sorted set). Under VTRR_LAYOUT=native the
    queue is then converted (VTRR.CONVERT ... NATIVE) before the worker runs
    it: a 0.1.0 deployment's queue, moved to the native layout in place.
    """
    import vtrr_queue

    s = harness()
    old_app = Celery("old_producer", broker=s.broker_url)
    old = vtrr_queue.VTRRQueue(s.client, old_app, name=s.name, celery_queue=s.celery_queue)
    old_task = old.task(project.job)  # same function, so the same task_name in the payload
    assert old_task.name == s.task.name
    old_task.queue(
        partition_key="u_1",
        tasks=[
            {"weight": 2, "args": ["o1", "record", 7], "kwargs": {"force": True}, "id": "o1"},
            {"args": ["o2"]},
        ],
    )
    old_task.queue(partition_key="u_2", tasks=[{"args": ["o3"], "kwargs": {"k": "v"}, "id": "o3"}])
    assert s.client.type(f"vtrr:{s.name}:queue") == b"zset"
    assert s.queue.stats().queued == 3
    # vtrr-queue 0.1.0 keeps no `meta` and no per-partition counts:
    assert s.queue.check() != []
    s.queue.recount()
    if layout() == "native":
        assert s.queue.convert("native")
        assert s.queue.stats().layout == "native"
    # The triggers are vtrr-queue's own ({"is_start": True}): this worker answers them.
    assert s.triggers_in_broker() == 3
    with s.worker():
        runs = s.wait_runs(3)
        s.wait_drained()
    by_id = {run["id"]: run for run in runs}
    assert set(by_id) == {"o1", "o2", "o3"} and len(runs) == 3
    assert by_id["o1"]["rest"] == [7] and by_id["o1"]["kwargs"] == {"force": True}
    assert by_id["o3"]["kwargs"] == {"k": "v"}
    # Scored by 0.1.0's script: o1 and o3 at 1 (ties by id), o2 at 3 (o1 weighs 2).
    assert [run["id"] for run in runs] == ["o1", "o3", "o2"]
    assert s.queue.check() == []


def test_vtrr_queue_0_1_0_dequeues_what_this_package_enqueues(
    harness: Callable[..., Setup],
) -> None:
    import vtrr_queue

    s = harness()
    old = vtrr_queue.VTRRQueue(
        s.client, Celery("old_worker", broker=s.broker_url), name=s.name, celery_queue="unused"
    )
    s.task.queue("u_1", [{"args": ["n1", "record"], "kwargs": {"a": [1]}, "id": "n1"}])
    payload = s.client.hget(f"vtrr:{s.name}:task", "n1") if layout() == "keys" else None
    if layout() == "native":
        with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
            old._dequeue()  # a native queue is one key of the module's type: the scripts cannot touch it
        return
    assert payload == encode_payload(s.task.name, ["n1", "record"], {"a": [1]}).encode()
    assert json.loads(payload) == {
        "task_name": "celery_project.project.job",
        "args": ["n1", "record"],
        "kwargs": {"a": [1]},
    }
    assert old._dequeue() == ("celery_project.project.job", ["n1", "record"], {"a": [1]})


def test_a_crashed_workers_task_is_reclaimed_and_runs_again_on_another_worker(
    harness: Callable[..., Setup],
) -> None:
    """Worker 1 dies mid-task (os._exit) holding the lease and its prefetched triggers.

    The server's timer reclaims the item when the 1 s lease expires; worker 2
    runs Celery Beat (-B) with reclaim_interval 0.5 s, whose
    reclaim_and_dispatch sends the triggers nobody else would.
    """
    s = harness(lease_seconds=1, reclaim_interval=0.5)
    s.task.queue(
        "p", [{"args": ["crash-me", "crash"], "id": "c1"}, {"args": ["after"], "id": "c2"}]
    )
    with s.worker() as first:
        s.wait(lambda: first.poll() is not None, "worker 1 to die")
    assert first.returncode == 17
    assert [run["id"] for run in s.runs("started")] == ["crash-me"]
    assert s.queue.stats().inflight == 1, "the dead worker's lease is still out"
    # Whatever triggers worker 1 had not fetched yet: gone too (it may have
    # prefetched them all), so that only Beat's reclaim_and_dispatch can wake worker 2.
    s.broker.delete(s.celery_queue)
    assert s.triggers_in_broker() == 0
    with s.worker(beat=True):
        runs = s.wait_runs(2, timeout=30)
        s.wait_drained()
    by_id = {run["id"]: run for run in runs}
    assert set(by_id) == {"crash-me", "after"}
    assert by_id["crash-me"]["timeouts"] == 1, "its second delivery, after one expired lease"
    assert by_id["after"]["timeouts"] == 0
    assert f"Task {s.vtrr.reclaim_task_name}[" in s.log_text(), "Beat's reclaim task ran"
    assert s.queue.check() == []


def test_a_task_longer_than_its_lease_keeps_it_renewed(harness: Callable[..., Setup]) -> None:
    """Lease 1 s, the task sleeps 2.5 s in a prefork child: renewed, never reclaimed, runs once.

    A second pool process is free, and reclaim_and_dispatch is called after
    the lease would have expired: a reclaimed item would run again there.
    """
    s = harness(lease_seconds=1)
    s.task.queue("p", [{"args": ["long", "sleep"], "kwargs": {"seconds": 2.5}}])
    with s.worker(pool="prefork", concurrency=2):
        s.wait(lambda: len(s.runs("started")) == 1, "the task to start")
        time.sleep(1.6)
        stats = s.queue.stats()
        assert (stats.inflight, stats.expired, stats.queued) == (1, 0, 0), stats
        assert s.vtrr.reclaim_and_dispatch() == 0, "nothing expired, nothing waiting"
        runs = s.wait_runs(1)
        s.wait_drained()
        time.sleep(0.3)
    assert len(s.runs("started")) == 1 and len(s.runs()) == 1
    assert (runs[0]["timeouts"], runs[0]["lost"]) == (0, False)
    assert s.queue.check() == []


def test_celery_priorities_are_served_in_the_redis_transports_order(
    harness: Callable[..., Setup],
) -> None:
    s = harness()
    s.task.queue("p", [{"args": [f"plain-{i}"], "id": f"plain-{i}"} for i in range(3)])
    s.task.queue("p", [{"args": ["nine"], "id": "nine"}], priority=9)
    s.task.queue("q", [{"args": ["zero"], "id": "zero"}], priority=0)
    s.task.queue("q", [{"args": ["three"], "id": "three"}], priority=3)
    with s.worker(pool="solo", concurrency=1):
        runs = s.wait_runs(6, timeout=30)
        s.wait_drained()
    order = [run["id"] for run in runs]
    # 0, like no priority, comes first (in turns by partition), then 3, then 9.
    assert order[:4] == ["plain-0", "zero", "plain-1", "plain-2"], order
    assert order[4:] == ["three", "nine"], order
    assert s.queue.check() == []


def test_bad_input_is_refused_before_anything_is_enqueued(harness: Callable[..., Setup]) -> None:
    s = harness()
    with pytest.raises(vtrr.SerializationError, match=r"tasks\[1\]"):
        s.task.queue("p", [{"args": ["ok"]}, {"args": [object()]}])
    with pytest.raises(vtrr.SerializationError):
        s.task.queue("p", [{"kwargs": {"when": {1, 2}}}])
    with pytest.raises(TypeError):  # SerializationError is a TypeError too
        s.task.queue("p", [{"args": "not-a-list"}])
    with pytest.raises(TypeError, match="wieght"):
        s.task.queue("p", [{"wieght": 3}])
    with pytest.raises(ValueError, match="weight"):
        s.task.queue("p", [{"weight": 0}])
    with pytest.raises(ValueError, match="partition_key"):
        s.task.queue("", [{"args": []}])
    for bad in (10, -1):
        with pytest.raises(ValueError, match="priority"):
            s.task.queue("p", [{"args": []}], priority=bad)
    assert s.task.queue("p", []) == []
    stats = s.queue.stats()
    assert (stats.queued, stats.partitions) == (0, 0), "nothing was enqueued"
    assert s.triggers_in_broker() == 0, "and no trigger sent"

    other = VTRRQueue(s.client, Celery("other", broker=s.broker_url), name=s.name + "x")
    with pytest.raises(TypeError, match="queue"):
        other.task(queue="elsewhere")
    with pytest.raises(TypeError, match="bind"):
        other.task(bind=False)
    assert "acks_late" in ALLOWED_TASK_OPTIONS and "base" in ALLOWED_TASK_OPTIONS
    assert len(ALLOWED_TASK_OPTIONS) == 12

    @other.task
    def first(self: Any) -> None: ...

    with pytest.raises(ValueError, match="one task per queue"):
        other.task(max_retries=1)(project.job)


def test_an_exception_is_not_run_again_but_dead_lettered_with_its_traceback(
    harness: Callable[..., Setup],
) -> None:
    """Celery's FAILURE: not retried (no autoretry_for matches), and not lost either."""
    s = harness(lease_seconds=1)
    s.task.queue("p", [{"args": ["boom", "raise"], "id": "boom"}, {"args": ["next"], "id": "next"}])
    with s.worker():
        s.wait_runs(2)
        s.wait_drained()
        # Were it still leased, it would expire now and be sent again:
        time.sleep(1.2)
        s.vtrr.reclaim_and_dispatch()
        time.sleep(0.5)
    assert [run["id"] for run in s.runs()] == ["boom", "next"]
    stats = s.queue.stats()
    assert (stats.inflight, stats.queued, stats.dead) == (0, 0, 1)
    assert (stats.totals.acked, stats.totals.nacked, stats.totals.dead) == (1, 1, 1)
    [dead] = s.queue.dead()
    assert (dead.id, dead.partition, dead.reason) == ("boom", "p", "nack")
    assert dead.last_error is not None
    assert dead.last_error.startswith(
        "ValueError: job boom fails\nTraceback (most recent call last):"
    )
    assert 'in job\n    raise ValueError(f"job {job_id} fails")' in dead.last_error
    log = s.log_text()
    # Celery's own line, with the traceback, names the item; then where it went.
    assert (
        "Task celery_project.project.job[boom] raised unexpected: ValueError('job boom fails')"
        in log
    )
    assert "boom (partition p) failed (ValueError('job boom fails')): dead-lettered" in log
    assert s.queue.revive("boom") == 1, "VTRR.REVIVE runs it again"


def test_a_task_whose_retries_are_spent_is_dead_lettered_with_the_last_error(
    harness: Callable[..., Setup],
) -> None:
    """autoretry_for with max_retries=3: four attempts, then Celery's FAILURE."""
    s = harness()
    s.task.queue("p", [{"args": ["f1", "flaky"], "id": "f1"}])
    with s.worker():
        s.wait(lambda: s.queue.stats().dead == 1, "the item dead-lettered", timeout=30)
    assert [run["retries"] for run in s.runs()] == [0, 1, 2, 3]
    [dead] = s.queue.dead()
    assert dead.id == "f1" and dead.last_error is not None
    assert dead.last_error.split("\n")[0].endswith("TransientError: f1 attempt 3")
    assert s.queue.check() == []


def test_the_worker_log_names_each_run_by_its_item_and_not_the_empty_triggers(
    harness: Callable[..., Setup],
) -> None:
    s = harness()
    ids = s.task.queue("alice", [{"args": [f"x{i}"]} for i in range(3)])
    for _ in range(3):  # triggers that find nothing to run
        s.task.celery_task.apply_async(queue=s.celery_queue)
    with s.worker():
        s.wait_runs(3)
        s.wait_drained()
        s.wait(lambda: s.triggers_in_broker() == 0 and s.idle(), "every trigger to run")
    log = s.log_text()
    for item_id in ids:
        assert f"Task celery_project.project.job[{item_id}] succeeded in " in log, log
    assert log.count("Task celery_project.project.job[") == 3, (
        "one line per item run: no trigger's 'received', no empty trigger's 'succeeded ...: None'"
    )


def test_celerys_ways_of_calling_a_task_point_to_queue(harness: Callable[..., Setup]) -> None:
    s = harness()
    for name in ("delay", "apply_async", "s", "signature"):
        with pytest.raises(AttributeError, match=rf"has no {name}\(\): .*\.queue\(partition_key"):
            getattr(s.task, name)("x1")
        assert not hasattr(s.task, name)
    with pytest.raises(AttributeError, match="'VTRRTask' object has no attribute 'nope'"):
        s.task.nope  # noqa: B018
    assert s.queue.stats().queued == 0 and s.triggers_in_broker() == 0


def test_retry_and_autoretry_keep_the_lease_and_ack_after_the_retry_run(
    harness: Callable[..., Setup],
) -> None:
    s = harness()
    s.task.queue("p", [{"args": ["r1", "retry"], "kwargs": {"countdown": 1.0}, "id": "r1"}])
    s.task.queue("q", [{"args": ["r2", "autoretry"], "id": "r2"}])
    with s.worker():
        s.wait(lambda: {run["id"] for run in s.runs()} >= {"r1", "r2"}, "the first attempts")
        # r1 waits for its retry (countdown 1 s) still leased: not queued, not reclaimed.
        stats = s.queue.stats()
        assert stats.queued == 0 and stats.inflight >= 1, stats
        runs = s.wait_runs(4)
        s.wait_drained()
    attempts = {(run["id"], run["retries"]) for run in runs}
    assert attempts == {("r1", 0), ("r1", 1), ("r2", 0), ("r2", 1)}
    for run in runs:
        assert (run["timeouts"], run["nacks"]) == (0, 0), "the same delivery, never reclaimed"
    stats = s.queue.stats()
    assert (stats.inflight, stats.queued, stats.dead) == (0, 0, 0)
    assert s.queue.check() == []


def test_a_retry_whose_lease_was_lost_meanwhile_is_dropped(harness: Callable[..., Setup]) -> None:
    """A retry countdown longer than the lease: reclaimed, run again fresh, the retry run dropped."""
    s = harness(lease_seconds=0.6)
    s.task.queue("p", [{"args": ["late", "retry"], "kwargs": {"countdown": 1.8}, "id": "late"}])
    with s.worker():
        s.wait_runs(1)
        s.wait(lambda: s.queue.stats().queued == 1, "the expired lease to be reclaimed")
        assert s.vtrr.reclaim_and_dispatch() == 1
        s.wait_runs(2)
        s.wait(lambda: "retry of late dropped" in s.log_text(), "the retry run to be dropped")
        s.wait_drained()
    runs = s.runs()
    assert [(run["timeouts"], run["retries"]) for run in runs] == [(0, 0), (1, 0)]
    assert s.queue.check() == []


def test_a_user_base_runs_under_the_lease_and_the_low_level_api(
    harness: Callable[..., Setup],
) -> None:
    """In process (Task.apply): a user `base` keeps its behaviour, after the lease is taken."""
    s = harness()
    seen: list[int] = []

    class Audited(Task):  # type: ignore[misc]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(self.request.vtrr_timeouts)
            return super().__call__(*args, **kwargs)

    q = VTRRQueue(
        s.client,
        Celery("eager", broker=s.broker_url),
        name=s.name + "b",
        celery_queue=s.celery_queue,
    )

    @q.task(base=Audited, time_limit=60)
    def double(self: Any, x: int) -> int:
        return x * 2

    assert isinstance(double.celery_task, Audited)
    assert double(None, 4) == 8, "calling the VTRRTask calls the function"
    double.queue("p", [{"args": [21]}])
    assert double.celery_task.apply().get() == 42
    assert seen == [0]
    assert (q.queue.stats().inflight, q.queue.stats().queued) == (0, 0), "acked"

    double.queue("p", [{"args": [1], "id": "low"}])
    dequeued = q._dequeue()
    assert dequeued is not None
    task_name, args, kwargs, task_id, token, timeouts = dequeued
    assert (task_name, args, kwargs, task_id, timeouts) == (double.name, [1], {}, "low", 0)
    assert q.ack(task_id, token) and not q.ack(task_id, token), (
        "fenced: the second ACK finds nothing"
    )
    assert q._dequeue() is None
