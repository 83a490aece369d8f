"""vtrr.django: a real Django project (tests/djangoproject), real workers in subprocesses.

The test process configures Django with the project's settings and enqueues;
threadmill's `manage.py threadmill worker` and this package's
`manage.py vtrr_worker` run the tasks as subprocesses (each in its own
process group, killed in a finally). Each test gets its own vtrr queue
names (a prefix of its own) on the session's server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from servers import Cluster, Server

import vtrr

HERE = Path(__file__).resolve().parent
MANAGE = HERE / "djangoproject" / "manage.py"
LEASE_SECONDS = 2.0
THREADMILL_WORKER = ("threadmill", "worker", "-w", "1", "-t", "1")


@pytest.fixture(scope="session")
def project_settings() -> ModuleType:
    """Django set up in this process with the test project's settings (not via the environment)."""
    import django
    from django.conf import settings

    module = importlib.import_module("djangoproject.settings")
    if not settings.configured:
        settings.configure(
            **{name: getattr(module, name) for name in dir(module) if name.isupper()}
        )
        django.setup()
    return module


@pytest.fixture
def tasks(project: Project) -> ModuleType:
    return importlib.import_module("djangoproject.tasks")


def wait_for(
    condition: Callable[[], object], timeout: float, what: str, logs: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs()}")
        time.sleep(0.05)


@dataclasses.dataclass
class Project:
    """One test's view of the project: its env, its workers, its Redis list of completions."""

    server: Server
    prefix: str
    directory: Path
    client: redis.Redis
    processes: list[tuple[str, subprocess.Popen[bytes]]] = dataclasses.field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "VTRR_DJANGO_URL": self.server.url,
            "VTRR_DJANGO_PREFIX": self.prefix,
            "VTRR_DJANGO_LEASE_SECONDS": str(LEASE_SECONDS),
            "PYTHONUNBUFFERED": "1",
        }

    def start(self, *args: str, debug: bool = False) -> subprocess.Popen[bytes]:
        """`manage.py <args>` in its own process group, output to a log file; `debug`: DEBUG on."""
        name = f"{len(self.processes)}-{args[0]}"
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, str(MANAGE), *args],
            env={**self.env, "VTRR_DJANGO_DEBUG": "1" if debug else "0"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes.append((name, process))
        return process

    def run(self, *args: str, timeout: float = 60, debug: bool = False) -> None:
        """`manage.py <args>` to its end; it must exit 0."""
        process = self.start(*args, debug=debug)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"manage.py {' '.join(args)} did not exit\n{self.logs()}"
            ) from None
        assert code == 0, f"manage.py {' '.join(args)} exited {code}\n{self.logs()}"

    def kill(self, process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the whole group (threadmill's worker processes are the command's children)."""
        # Even when the command itself has exited: its group outlives it while
        # a child lives (and its id is not reused while the group exists).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        if sig == signal.SIGKILL:
            process.wait(10)

    def stop_all(self) -> None:
        for _, process in self.processes:
            self.kill(process)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')}"
            for path in sorted(self.directory.glob("*.log"))
        )

    def done(self) -> list[str]:
        entries: list[bytes] = self.client.lrange(f"{self.prefix}:done", 0, -1)  # type: ignore[assignment]
        return [entry.decode() for entry in entries]

    def queue(self, queue_name: str = "default") -> vtrr.Queue:
        return vtrr.Queue(self.client, "{" + self.prefix + ":" + queue_name + "}")

    @property
    def backend(self) -> Any:
        from django.tasks import task_backends

        return task_backends["default"]


@pytest.fixture
def project(server: Server, project_settings: ModuleType, tmp_path: Path) -> Iterator[Project]:
    from django.tasks import task_backends
    from django.test import override_settings

    prefix = f"django:t{uuid.uuid4().hex[:10]}"
    with override_settings(
        TASKS=project_settings.tasks_setting(server.url, prefix, LEASE_SECONDS),
        TEST_REDIS_URL=server.url,
        TEST_PREFIX=prefix,
        TEST_DONE_KEY=f"{prefix}:done",
    ):
        started = Project(server, prefix, tmp_path, server.client())
        try:
            yield started
        finally:
            started.stop_all()
            for backend in task_backends.all(initialized_only=True):
                backend.close()
            started.client.close()


def status(project: Project, result_id: str) -> str:
    return str(project.backend.get_result(result_id).status)


# 1. enqueue here, threadmill's worker runs it, get_result reads every state.
def test_threadmill_worker_runs_tasks_and_get_result_follows_them(
    project: Project, tasks: ModuleType
) -> None:
    from django.tasks import TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist

    ok = tasks.add.enqueue(2, 3)
    bad = tasks.fail.enqueue("boom")
    assert ok.status == TaskResultStatus.READY
    assert tasks.add.get_result(ok.id).status == TaskResultStatus.READY, "recorded at enqueue"
    with pytest.raises(TaskResultDoesNotExist):
        project.backend.get_result(str(uuid.uuid4()))

    project.run(*THREADMILL_WORKER, "--exit-empty")

    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL, project.logs()
    assert ok.return_value == 5
    assert len(ok.worker_ids) == 1 and ok.started_at and ok.finished_at
    failed = tasks.fail.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is ValueError
    assert "boom" in failed.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value
    queue = project.queue()
    stats = queue.stats()
    assert (stats.queued, stats.inflight, stats.delayed, stats.dead) == (0, 0, 0, 0)
    assert queue.check() == []


# 2. Fairness: a heavy tenant's backlog does not hold back two light ones.
HEAVY, LIGHT = 30, 3


def enqueue_backlog(tasks: ModuleType, backend_alias: str = "default") -> set[str]:
    record = tasks.record.using(backend=backend_alias)
    for index in range(HEAVY):
        record.enqueue(f"heavy-{index}", partition_key="heavy")
    light = {f"{tenant}-{index}" for tenant in ("light-a", "light-b") for index in range(LIGHT)}
    for label in sorted(light):
        record.enqueue(label, partition_key=label.rsplit("-", 1)[0])
    return light


@pytest.mark.parametrize(
    "worker",
    [(*THREADMILL_WORKER, "--exit-empty"), ("vtrr_worker", "--concurrency", "1", "--exit-empty")],
    ids=["threadmill-worker", "vtrr_worker"],
)
def test_light_partitions_are_served_among_the_first(
    project: Project, tasks: ModuleType, worker: tuple[str, ...]
) -> None:
    light = enqueue_backlog(tasks)
    assert project.queue().partition("heavy").queued == HEAVY, "partition_key is the partition"
    assert project.queue().partition("light-a").queued == LIGHT

    project.run(*worker)

    done = project.done()
    assert len(done) == HEAVY + 2 * LIGHT, project.logs()
    positions = sorted(done.index(label) for label in light)
    assert positions[-1] < 12, f"light tasks finished at {positions}: {done}"


def test_threadmill_fifo_backend_serves_the_light_partitions_last(
    project: Project, tasks: ModuleType
) -> None:
    """The contrast: threadmill's own Redis backend is FIFO, so the same backlog starves them."""
    project.client.delete("threadmill:{fifo}:queue:default")
    light = enqueue_backlog(tasks, "fifo")
    project.run(*THREADMILL_WORKER, "--backend", "fifo", "--exit-empty")
    done = project.done()
    assert len(done) == HEAVY + 2 * LIGHT, project.logs()
    assert set(done[-2 * LIGHT :]) == light


# 3. run_after: not before its time, soon after.
def test_run_after_is_not_run_before_its_time(project: Project, tasks: ModuleType) -> None:
    from django.tasks import TaskResultStatus
    from django.utils import timezone

    run_after = timezone.now() + datetime.timedelta(seconds=2.5)
    later = tasks.stamp.using(run_after=run_after).enqueue("later")
    tasks.stamp.enqueue("now")
    counts = project.backend.telemetry().queues["default"].counts
    assert (counts.ready, counts.deferred) == (1, 1)
    assert status(project, later.id) == TaskResultStatus.READY

    worker = project.start(*THREADMILL_WORKER)
    wait_for(lambda: "now" in project.done(), 20, "the task without run_after", project.logs)
    while time.time() < run_after.timestamp() - 0.1:
        assert "later" not in project.done(), "ran before its run_after"
        time.sleep(0.05)
    wait_for(lambda: "later" in project.done(), 30, "the deferred task", project.logs)
    ran = tasks.stamp.get_result(later.id)
    assert ran.status == TaskResultStatus.SUCCESSFUL
    assert ran.return_value >= run_after.timestamp()
    project.kill(worker, signal.SIGTERM)


# 4. What is refused is refused whole: nothing enqueued.
def test_unserialisable_arguments_enqueue_nothing(project: Project, tasks: ModuleType) -> None:
    with pytest.raises(vtrr.SerializationError, match="not JSON-serialisable") as raised:
        tasks.record.enqueue(object())
    assert isinstance(raised.value, TypeError)
    with pytest.raises(vtrr.SerializationError):
        tasks.record.enqueue("tenant as a set", partition_key={"a"})
    run_after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with pytest.raises(vtrr.SerializationError):
        tasks.stamp.using(run_after=run_after).enqueue(datetime.datetime.now())

    stats = project.queue().stats()
    assert (stats.queued, stats.delayed, stats.partitions) == (0, 0, 0)
    assert project.client.keys("*" + project.prefix + "*") == [], "no record, no ingress"


# 4a. A partition at its MAX-QUEUED refuses a task whole: the MULTI's record and
# ingress writes, which EXEC runs whatever the enqueue replies, are taken back.
def test_a_full_partition_refuses_the_task_and_keeps_no_record(
    project: Project, tasks: ModuleType
) -> None:
    queue = project.queue()
    queue.set_limit("alice", max_queued=1)
    kept = tasks.record.enqueue("a1", partition_key="alice")
    before = sorted(project.client.keys("*" + project.prefix + "*"))
    run_after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    for refused_task in (tasks.record, tasks.record.using(run_after=run_after)):
        with pytest.raises(vtrr.PartitionFull) as full:
            refused_task.enqueue("a2", partition_key="alice")
        assert (full.value.partition, full.value.max_queued) == ("alice", 1)
    assert sorted(project.client.keys("*" + project.prefix + "*")) == before, "no record left"
    ingress = f"{queue.name}:ingress"
    assert [entry.decode() for entry in project.client.zrange(ingress, 0, -1)] == [kept.id]
    assert (queue.stats().queued, queue.stats().delayed) == (1, 0)
    assert tasks.record.get_result(kept.id).id == kept.id
    tasks.record.enqueue("b1", partition_key="bob")  # another partition is not held back


# 4b. Django's task priorities (-100..100) are the module's levels: served highest
# first, whatever was queued before them.
def test_task_priorities_are_served_highest_first(project: Project, tasks: ModuleType) -> None:
    assert project.backend.supports_priority
    for n in range(3):
        tasks.record.enqueue(f"plain-{n}")
    tasks.record.using(priority=-100).enqueue("last")
    tasks.record.using(priority=100).enqueue("first", partition_key="other")
    tasks.record.using(priority=5).enqueue("second")
    worker = project.start(*THREADMILL_WORKER)
    wait_for(lambda: len(project.done()) == 6, 20, "every task", project.logs)
    assert project.done() == ["first", "second", "plain-0", "plain-1", "plain-2", "last"]
    project.kill(worker, signal.SIGTERM)


# 5. peek and telemetry (what threadmill's inspector shows); SIGTERM finishes the running task.
def test_peek_and_telemetry_follow_every_state(project: Project, tasks: ModuleType) -> None:
    from django.tasks import TaskResultStatus
    from django.utils import timezone

    backend = project.backend
    ok = tasks.add.enqueue(1, 1)
    bad = tasks.fail.enqueue("no")
    project.run("vtrr_worker", "--exit-empty")

    gate_key = f"{project.prefix}:gate"
    held = tasks.gate.enqueue("gate", gate_key)
    first = tasks.record.enqueue("r1")
    second = tasks.record.enqueue("r2")
    deferred = tasks.record.using(run_after=timezone.now() + datetime.timedelta(hours=1)).enqueue(
        "deferred"
    )
    worker = project.start("vtrr_worker", "--concurrency", "1")
    wait_for(lambda: "gate:started" in project.done(), 20, "the gate task", project.logs)

    stats = backend.telemetry().queues["default"]
    counts = stats.counts
    assert (counts.ready, counts.running, counts.deferred) == (2, 1, 1)
    assert (counts.successful, counts.failed) == (1, 1)
    assert (stats.rates.ingress, stats.rates.egress) == (6, 2)
    assert backend.telemetry().queues["other"].counts.ready == 0

    def peek(state: TaskResultStatus, count: int = 0) -> list[Any]:
        return list(backend.peek("default", status=state, count=count))

    assert [r.id for r in peek(TaskResultStatus.READY)] == [first.id, second.id]
    assert [r.id for r in peek(TaskResultStatus.READY, 1)] == [first.id]
    running = peek(TaskResultStatus.RUNNING)
    assert [r.id for r in running] == [held.id]
    assert running[0].status == TaskResultStatus.RUNNING and len(running[0].worker_ids) == 1
    assert [r.id for r in peek(TaskResultStatus.SUCCESSFUL)] == [ok.id]
    assert [r.id for r in peek(TaskResultStatus.FAILED)] == [bad.id]
    assert peek(TaskResultStatus.FAILED)[0].status == TaskResultStatus.FAILED
    assert status(project, held.id) == TaskResultStatus.RUNNING
    assert status(project, deferred.id) == TaskResultStatus.READY

    # SIGTERM: the running task finishes and is acknowledged; nothing new is taken.
    worker.send_signal(signal.SIGTERM)
    wait_for(
        lambda: "SIGTERM: finishing the running tasks" in project.logs(),
        10,
        "the worker to take the signal",
        project.logs,
    )
    project.client.rpush(gate_key, "go")
    assert worker.wait(15) == 0, project.logs()
    assert status(project, held.id) == TaskResultStatus.SUCCESSFUL
    counts = backend.telemetry().queues["default"].counts
    assert (counts.ready, counts.running, counts.successful) == (2, 0, 2), project.logs()
    assert "r1" not in project.done()


# 6. A worker killed mid-task: the task comes back after its lease and runs on the next worker.
def test_killed_worker_task_runs_again_after_its_lease(project: Project, tasks: ModuleType) -> None:
    from django.tasks import TaskResultStatus

    hung = tasks.hang_first_attempt.enqueue("hang")
    worker = project.start(*THREADMILL_WORKER)
    wait_for(lambda: "hang:1" in project.done(), 20, "the first attempt", project.logs)
    first_worker = tasks.hang_first_attempt.get_result(hung.id).worker_ids
    time.sleep(LEASE_SECONDS)  # renewed meanwhile: still leased
    assert project.queue().stats().inflight == 1
    project.kill(worker)
    killed_at = time.monotonic()

    wait_for(
        lambda: project.queue().stats().queued == 1,
        LEASE_SECONDS + 5,
        "the reclaim",
        project.logs,
    )
    assert time.monotonic() - killed_at > LEASE_SECONDS / 2, "reclaimed before its lease ran out"
    project.run("vtrr_worker", "--exit-empty")

    result = tasks.hang_first_attempt.get_result(hung.id)
    assert result.status == TaskResultStatus.SUCCESSFUL, project.logs()
    assert result.return_value["attempt"] == 2
    assert result.worker_ids[:1] == first_worker and len(result.worker_ids) == 2
    assert project.done() == ["hang:1", "hang:2"]


def test_leases_are_renewed_while_a_task_runs(project: Project, tasks: ModuleType) -> None:
    """A task longer than two leases runs once, though a second thread is free to take it."""
    from django.tasks import TaskResultStatus

    long = tasks.sleep_then_record.enqueue("long", LEASE_SECONDS * 2.25)
    worker = project.start("vtrr_worker", "--concurrency", "2")
    wait_for(
        lambda: status(project, long.id) == TaskResultStatus.SUCCESSFUL,
        LEASE_SECONDS * 2.25 + 20,
        "the long task",
        project.logs,
    )
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0, project.logs()
    assert project.done() == ["long"]
    assert len(project.backend.get_result(long.id).worker_ids) == 1


# The backend's own API in this process: several queues, blocking, timeouts.
def test_acquire_watches_several_queues_and_times_out(project: Project, tasks: ModuleType) -> None:
    import queue

    from django.tasks import TaskResultStatus

    backend = project.backend
    with pytest.raises(queue.Empty):
        backend.acquire()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        backend.acquire("default", "other", timeout=datetime.timedelta(seconds=0.3))
    assert time.monotonic() - started >= 0.3

    other = tasks.add.using(queue_name="other")
    late = threading.Timer(0.4, lambda: other.enqueue(20, 22))
    late.start()
    try:
        running = backend.acquire(
            "default", "other", timeout=datetime.timedelta(seconds=5), worker="w"
        )
    finally:
        late.join()
    assert running.task.queue_name == "other" and running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == ["w"] and running.last_attempted_at is not None
    assert status(project, running.id) == TaskResultStatus.RUNNING
    backend.acknowledge(backend.execute(running))
    result = backend.get_result(running.id)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    with pytest.raises(ValueError, match="not acquired"):
        backend.acknowledge(result)


def test_a_lost_lease_does_not_overwrite_the_newer_run(project: Project, tasks: ModuleType) -> None:
    from django.tasks import TaskResultStatus

    backend = project.backend
    task_result = tasks.add.enqueue(1, 2)
    stale = backend.acquire(timeout=datetime.timedelta(seconds=1), worker="stale")
    project.queue().cancel(task_result.id)  # stands in for an expiry and another run
    backend.acknowledge(backend.execute(stale))
    assert status(project, task_result.id) == TaskResultStatus.RUNNING, (
        "the stale result is dropped"
    )


def test_on_a_cluster(cluster: Cluster, project: Project, tasks: ModuleType) -> None:
    """The same backend over redis.RedisCluster: every MULTI stays in the queue's slot."""
    from django.tasks import TaskResultStatus
    from django.utils import timezone

    from vtrr.django import VTRRBackend

    url = f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    prefix = f"django:c{uuid.uuid4().hex[:8]}"
    backend = VTRRBackend(
        "default",
        {
            "QUEUES": ["default", "other"],
            "OPTIONS": {"url": url, "cluster": True, "prefix": prefix, "lease_ttl": LEASE_SECONDS},
        },
    )
    try:
        now = backend.enqueue(tasks.add, (1, 2), {})
        soon = timezone.now() + datetime.timedelta(seconds=0.5)
        later = backend.enqueue(tasks.add.using(run_after=soon), (3, 4), {})
        for expected in (now.id, later.id):
            running = backend.acquire(timeout=datetime.timedelta(seconds=5), worker="c")
            assert running.id == expected
            backend.acknowledge(backend.execute(running))
        assert timezone.now() >= soon
        assert [backend.get_result(r.id).return_value for r in (now, later)] == [3, 7]
        assert backend.get_result(now.id).status == TaskResultStatus.SUCCESSFUL
        counts = backend.telemetry().queues["default"].counts
        assert (counts.ready, counts.successful) == (0, 2)
    finally:
        backend.close()


def test_partition_and_weight_options_are_dotted_paths(project: Project, tasks: ModuleType) -> None:
    from django.tasks.exceptions import InvalidTask

    from vtrr.django import VTRRBackend

    prefix = f"django:o{uuid.uuid4().hex[:8]}"
    options = {
        "url": project.server.url,
        "prefix": prefix,
        "partition": "djangoproject.tasks.tenant_of",
        "weight": "djangoproject.tasks.cost_of",
    }
    backend = VTRRBackend("default", {"QUEUES": ["default"], "OPTIONS": options})
    try:
        backend.enqueue(tasks.add, (3, 4), {})
        backend.enqueue(tasks.add, (2, 1), {})
        queue = backend.queue("default")
        odd, even = queue.partition("t1"), queue.partition("t0")
        assert (odd.queued, even.queued) == (1, 1)
        assert (odd.virtual_time, even.virtual_time) == (1 + 4, 1 + 1), (
            "each item's weight is cost_of"
        )
        with pytest.raises(InvalidTask, match="partition"):
            backend.enqueue(tasks.record, (7,), {"raw": True})  # tenant_of gives an int
        assert queue.stats().queued == 2, "a refused task enqueues nothing"
    finally:
        backend.close()


def small_backend(project: Project, **options: Any) -> Any:
    """A VTRRBackend of its own (own prefix) on the test server, with these options."""
    from vtrr.django import VTRRBackend

    prefix = f"django:s{uuid.uuid4().hex[:8]}"
    return VTRRBackend(
        "default",
        {
            "QUEUES": ["default"],
            "OPTIONS": {"url": project.server.url, "prefix": prefix, **options},
        },
    )


def test_a_late_acknowledge_of_an_expired_lease_is_a_no_op(
    project: Project, tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread A's lease expires and thread B of the same process leases the task again.

    A's acknowledge must neither ACK B's lease nor record A's run over B's;
    B's acknowledge must record B's run, and raise nothing (it would end
    threadmill's worker thread).
    """
    from concurrent.futures import ThreadPoolExecutor

    from django.tasks import TaskResultStatus

    from vtrr.heartbeat import Heartbeat

    backend = small_backend(project, lease_ttl=0.5)
    try:
        enqueued = backend.enqueue(tasks.add, (1, 2), {})
        with monkeypatch.context() as patch:
            # Nothing renews A's lease: a process stopped longer than its lease.
            patch.setattr(Heartbeat, "track", lambda self, lease: threading.Event())
            running_a = backend.acquire(timeout=datetime.timedelta(seconds=5), worker="A")
        with ThreadPoolExecutor(1) as thread_b:
            running_b = thread_b.submit(
                backend.acquire, timeout=datetime.timedelta(seconds=10), worker="B"
            ).result()
            assert running_b.id == running_a.id == enqueued.id
            assert running_b.worker_ids == ["A", "B"]

            backend.acknowledge(backend.execute(running_a))  # A, late
            assert backend.queue("default").stats().inflight == 1, "B's lease is not ACKed"
            record = backend.get_result(enqueued.id)
            assert (record.status, record.worker_ids) == (TaskResultStatus.RUNNING, ["A", "B"])

            thread_b.submit(lambda: backend.acknowledge(backend.execute(running_b))).result()
        result = backend.get_result(enqueued.id)
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
        assert result.worker_ids == ["A", "B"], "B's run is the one recorded"
        stats = backend.queue("default").stats()
        assert (stats.queued, stats.inflight) == (0, 0)
    finally:
        backend.close()


def test_partition_key_without_a_parameter_to_take_it_is_refused(
    project: Project, tasks: ModuleType
) -> None:
    """The function is called with `partition_key`: refused at enqueue, not when it runs."""
    from django.tasks import TaskResultStatus
    from django.tasks.exceptions import InvalidTask

    with pytest.raises(
        InvalidTask, match=r"djangoproject\.tasks\.add .*add `partition_key: str \| None = None`"
    ):
        tasks.add.enqueue(1, 2, partition_key="t1")
    assert project.client.keys("*" + project.prefix + "*") == [], "nothing written"
    tasks.add.enqueue(1, 2)  # without it: the default partition

    noted = tasks.note.enqueue("n", partition_key="t1")  # **meta takes it
    assert project.queue().partition("t1").queued == 1
    backend = project.backend
    for _ in range(2):
        backend.acknowledge(backend.execute(backend.acquire(timeout=datetime.timedelta(seconds=5))))
    result = backend.get_result(noted.id)
    assert (result.status, result.return_value) == (
        TaskResultStatus.SUCCESSFUL,
        {"partition_key": "t1"},
    )


def test_a_record_expires_only_after_its_task_finished(project: Project, tasks: ModuleType) -> None:
    """Queued, deferred or running longer than lease_ttl + result_ttl, a task keeps its record."""
    from django.tasks import TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.utils import timezone

    backend = small_backend(project, lease_ttl=1, result_ttl=0.5)

    def ttl_ms(result_id: str) -> int:
        return int(project.client.pttl(backend.vtrr_name("default") + ":result:" + result_id))

    try:
        queued = backend.enqueue(tasks.add, (1, 1), {})
        run_after = timezone.now() + datetime.timedelta(hours=1)
        deferred = backend.enqueue(tasks.add.using(run_after=run_after), (2, 2), {})
        time.sleep(1.8)  # past lease_ttl + result_ttl
        assert backend.get_result(queued.id).status == TaskResultStatus.READY
        assert backend.get_result(deferred.id).status == TaskResultStatus.READY
        ready = backend.peek("default", status=TaskResultStatus.READY, count=0)
        assert [r.id for r in ready] == [queued.id]
        assert (ttl_ms(queued.id), ttl_ms(deferred.id)) == (-1, -1), "no TTL while queued"

        running = backend.acquire(timeout=datetime.timedelta(seconds=5), worker="w")
        assert running.id == queued.id and ttl_ms(queued.id) == -1, "no TTL while leased"
        backend.acknowledge(backend.execute(running))
        assert 0 < ttl_ms(queued.id) <= 500, "result_ttl once finished"
        wait_for(
            lambda: (
                not project.client.exists(backend.vtrr_name("default") + ":result:" + queued.id)
            ),
            5,
            "the finished record to expire",
            project.logs,
        )
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(queued.id)
        assert ttl_ms(deferred.id) == -1
    finally:
        backend.close()


def test_a_task_that_cannot_load_is_dead_lettered_and_its_record_expires(
    project: Project,
) -> None:
    import queue

    backend = small_backend(project, result_ttl=60)
    try:
        record_key = backend.vtrr_name("default") + ":result:bad"
        project.client.set(record_key, "not a TaskResult")
        backend.queue("default").enqueue("p", "bad", b"not a TaskResult")
        with pytest.raises(queue.Empty):
            backend.acquire()
        assert backend.queue("default").stats().dead == 1
        assert 0 < int(project.client.pttl(record_key)) <= 60_000
    finally:
        backend.close()


def test_the_vtrr_worker_logs_a_failure_once_with_timestamps(
    project: Project, tasks: ModuleType
) -> None:
    """With DEBUG on (development), Django logs each task's end too: not its traceback again."""
    failing = tasks.fail.enqueue("boom")
    project.run("vtrr_worker", "--exit-empty", debug=True)
    log = project.logs()
    assert log.count("Traceback (most recent call last)") == 1, log
    assert log.count("ValueError: boom") == 1, log
    assert f"Task id={failing.id} path=djangoproject.tasks.fail state=FAILED" in log, (
        "Django's own line, without the traceback"
    )
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
    for says in (
        "INFO vtrr.django: vtrr_worker: backend 'default'",
        f"ERROR vtrr.django: vtrr: task {failing.id} failed",
        "INFO vtrr.django: vtrr_worker: stopped",
    ):
        assert re.search(f"^{stamp}{re.escape(says)}", log, re.MULTILINE), (says, log)
