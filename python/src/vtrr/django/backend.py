"""`VTRRBackend`: Django tasks in vtrr queues, run by threadmill's worker or `vtrr_worker`.

One vtrr queue per Django queue name: `{<prefix>:<queue_name>}` (prefix
`django:<alias>` unless the `prefix` option says otherwise), so the module's
keys are `vtrr:{django:default:default}:*`. The backend's own keys sit beside
them, with the same hash tag, so one MULTI can write both on a Redis Cluster:

- `{...}:result:<id>`: the task's record, its serialised `TaskResult`
  (READY at enqueue, RUNNING at acquire, SUCCESSFUL/FAILED at acknowledge),
  what `get_result` reads; it has no TTL until the task finishes, then
  `result_ttl` (why: in `enqueue`);
- `{...}:successful` and `{...}:failed`: sorted sets of finished ids by finish
  time (ms), trimmed to `result_ttl`, for `peek` and `telemetry`;
- `{...}:ingress`: sorted set of enqueued ids by enqueue time (ms), trimmed to
  `result_ttl`, for `telemetry`'s ingress rate.

The vtrr item's id is the `TaskResult` id and its payload the serialised
READY `TaskResult` (threadmill's `serialize_task_result`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import math
import queue as queue_module
import threading
import time
import traceback
import uuid
from collections.abc import Generator, Mapping, Sequence
from inspect import iscoroutinefunction
from typing import Any, cast

import redis
import redis.exceptions
from django.core.exceptions import ImproperlyConfigured
from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string
from threadmill.backends.base import (
    BackendTelemetry,
    ThreadmillTaskBackend,
)

from .. import commands
from ..client import Queue, server_of
from ..errors import PartitionFull, SerializationError, translate
from ..heartbeat import Heartbeat
from ..limits import MAX_MS, MAX_WEIGHT, check_int
from ..types import Item, Lease, decode
from . import telemetry
from .options import (
    PartitionFunc,
    WeightFunc,
    check_partition_kwarg,
    default_partition,
    default_weight,
    duration,
    function,
    ms,
    vtrr_queue_name,
)

logger = logging.getLogger("vtrr.django")

_BLOCK_SLICE_SECONDS = 0.25  # how long one blocking LEASE watches one of several queues
_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


@dataclasses.dataclass(slots=True)
class _Held:
    """A lease one thread of this process holds for the task it runs."""

    queue_name: str
    queue: Queue
    lease: Lease
    lost: threading.Event


def _task_error(exception: BaseException) -> TaskError:
    kind = type(exception)
    return TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(traceback.format_exception(exception)),
    )


class VTRRBackend(ThreadmillTaskBackend):  # type: ignore[misc]
    """A threadmill task backend over vtrr: fair by partition, leased, fenced.

    Options (`TASKS[alias]["OPTIONS"]`): `url` (required; threadmill's
    top-level `REDIS_URL` is read when it is absent), `cluster` (bool: a
    `redis.RedisCluster` client), `prefix` (default `django:<alias>`),
    `partition` and `weight` (callables `(task, args, kwargs)` or their dotted
    paths; defaults `default_partition`, `default_weight`), `lease_ttl`
    (default 1 hour; leases are renewed while tasks run) and `result_ttl`
    (default 1 day), each a timedelta or seconds.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    # Django's -100..100 is the module's PRIORITY: strict between levels,
    # fair between partitions inside one.
    supports_priority = True
    # The module's timer reclaims expired leases and promotes due tasks: no broker.
    broker_class = None

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias=alias, params=params)
        options: Mapping[str, Any] = self.options
        if not self.queues:
            raise ImproperlyConfigured(
                f"VTRRBackend {alias!r} needs its QUEUES listed (get_result and telemetry look in each)"
            )
        url = options.get("url") or params.get("REDIS_URL")
        if not url:
            raise ImproperlyConfigured(
                f"VTRRBackend {alias!r} needs OPTIONS['url'] (a redis:// URL)"
            )
        self.url: str = url
        self.client: redis.Redis | redis.RedisCluster = (
            redis.RedisCluster.from_url(url)
            if options.get("cluster")
            else redis.Redis.from_url(url)
        )
        self.prefix: str = str(options.get("prefix", f"django:{alias}"))
        self.lease_ttl = duration(options, "lease_ttl", datetime.timedelta(hours=1))
        self.result_ttl = duration(options, "result_ttl", datetime.timedelta(days=1))
        self.lease_ms = ms(self.lease_ttl)
        self.result_ttl_ms = ms(self.result_ttl)
        if self.lease_ms > MAX_MS:
            raise ImproperlyConfigured("VTRRBackend option 'lease_ttl' must be at most ten years")
        self.partition_func: PartitionFunc = function(options, "partition", default_partition)
        self.weight_func: WeightFunc = function(options, "weight", default_weight)
        self._lock = threading.Lock()
        # Keyed by (task id, thread): the thread that acquired a task is the one
        # that acknowledges it (threadmill's worker threads, vtrr_worker's). A
        # task whose lease expired can be leased again by another thread of
        # this process while the first still runs it: each finds its own lease.
        self._held: dict[tuple[str, int], _Held] = {}
        self._heartbeats: dict[str, Heartbeat] = {}
        self._vtrr_queues: dict[str, Queue] = {}

    # Names.
    def vtrr_name(self, queue_name: str) -> str:
        """The vtrr queue holding this Django queue's tasks."""
        return vtrr_queue_name(self.prefix, queue_name)

    def queue(self, queue_name: str) -> Queue:
        """The typed client of a Django queue's vtrr queue."""
        with self._lock:
            found = self._vtrr_queues.get(queue_name)
            if found is None:
                found = self._vtrr_queues[queue_name] = Queue(
                    self.client, self.vtrr_name(queue_name)
                )
            return found

    def _key(self, queue_name: str, suffix: str) -> str:
        return f"{self.vtrr_name(queue_name)}:{suffix}"

    def _record_key(self, queue_name: str, result_id: str) -> str:
        return self._key(queue_name, f"result:{result_id}")

    def _finished_key(self, queue_name: str, status: TaskResultStatus) -> str:
        return self._key(
            queue_name, "successful" if status == TaskResultStatus.SUCCESSFUL else "failed"
        )

    def _check_queue(self, queue_name: str) -> None:
        if queue_name not in self.queues:
            raise ValueError(
                f"queue {queue_name!r} is not one of backend {self.alias!r}'s QUEUES {sorted(self.queues)}"
            )

    # Sending.
    def _execute(self, pipe: Any) -> list[Any]:
        """The pipeline's replies; its first error raised as `Queue` raises one.

        Read from the replies: the error redis-py raises from a pipeline puts
        the command's number and text before the code `translate` reads.
        """
        try:
            replies = cast(list[Any], pipe.execute(raise_on_error=False))
        except redis.exceptions.ResponseError as error:  # a MULTI refused whole (EXECABORT)
            raise translate(error, server_of(self.client)) from error
        for reply in replies:
            if isinstance(reply, redis.exceptions.ResponseError):
                raise translate(reply, server_of(self.client)) from reply
        return replies

    def _server_now_ms(self, queue_name: str) -> int:
        """The clock of the server holding the queue (TIME), in Unix ms."""
        client = cast(Any, self.client)
        if isinstance(self.client, redis.RedisCluster):
            node = client.get_node_from_key(f"vtrr:{self.vtrr_name(queue_name)}:queue")
            reply = client.execute_command("TIME", target_nodes=node)
        else:
            reply = client.execute_command("TIME")
        seconds, micros = reply
        return int(seconds) * 1000 + int(micros) // 1000

    @classmethod
    def deserialize_task_result(cls, data: str) -> TaskResult:
        """threadmill's, with `takes_context` restored.

        threadmill 0.3.1 rebuilds the Task without it (always False), so a
        `@task(takes_context=True)` function would be called without its
        context: it is taken from the task as the code defines it now.
        """
        result = super().deserialize_task_result(data)
        task = result.task
        try:
            defined = import_string(task.module_path)
        except ImportError:
            return result
        if isinstance(defined, Task) and defined.takes_context != task.takes_context:
            object.__setattr__(
                result, "task", dataclasses.replace(task, takes_context=defined.takes_context)
            )
        return result

    # Django's task backend API.
    def enqueue(
        self, task: Any, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None
    ) -> TaskResult:
        """One VTRR.ENQUEUE (VTRR.DEFER with `run_after`) and the READY record, in one MULTI.

        `vtrr.PartitionFull` when the task's partition is at its MAX-QUEUED:
        nothing is enqueued and no record is left.
        """
        self.validate_task(task)
        check_partition_kwarg(task, kwargs or {})
        enqueued_at = timezone.now()
        try:
            task_result = TaskResult(
                task=task,
                id=str(uuid.uuid4()),
                status=TaskResultStatus.READY,
                enqueued_at=enqueued_at,
                started_at=None,
                finished_at=None,
                last_attempted_at=None,
                args=list(args or ()),
                kwargs=dict(kwargs or {}),
                backend=self.alias,
                errors=[],
                worker_ids=[],
            )
            payload = self.serialize_task_result(task_result)
        except (TypeError, ValueError) as error:
            raise SerializationError(
                f"the arguments of task {task.module_path} are not JSON-serialisable ({error}): "
                "nothing was enqueued"
            ) from error
        partition = self.partition_func(task, task_result.args, task_result.kwargs)
        if not isinstance(partition, str) or not partition:
            raise InvalidTask(f"the partition of a task must be a non-empty str, not {partition!r}")
        weight = self.weight_func(task, task_result.args, task_result.kwargs)
        try:
            check_int("the weight of a task", weight, 1, MAX_WEIGHT)
        except (TypeError, ValueError) as error:
            raise InvalidTask(f"{error}: {weight!r}") from None

        queue_name = task.queue_name
        name = self.vtrr_name(queue_name)
        item = Item(partition, task_result.id, payload, weight)
        delay_ms = 0
        if task.run_after is not None:
            # Measured on the server's clock, the one VTRR.DEFER counts from:
            # the task falls due when the server's clock reaches run_after,
            # whatever the skew of the host that enqueued it.
            delay_ms = max(
                0, math.ceil(task.run_after.timestamp() * 1000) - self._server_now_ms(queue_name)
            )
            if delay_ms > MAX_MS:
                raise InvalidTask("run_after must be at most ten years away")
        priority = task.priority
        command = (
            commands.defer(name, delay_ms, [item], priority=priority)
            if delay_ms
            else commands.enqueue_many(name, [item], priority=priority)
        )
        enqueued_ms = enqueued_at.timestamp() * 1000
        record = self._record_key(queue_name, task_result.id)
        ingress = self._key(queue_name, "ingress")
        pipe = self.client.pipeline(transaction=True)
        pipe.execute_command(*command.args)
        # No TTL while the task is queued, deferred or leased (the RUNNING SET
        # drops any TTL too); acknowledge gives it `result_ttl`. How long a task
        # waits or runs has no bound, so any TTL set before it finishes (or
        # refreshed when it is leased) could expire while it still waits:
        # get_result would lose a live task. This costs nothing per task; a
        # record outlives its task only when the item leaves the queue behind
        # the backend's back (VTRR.CANCEL, a max_timeouts dead letter). The
        # backend's own dead letters (_lease_one) get `result_ttl`.
        pipe.set(record, payload)
        pipe.zadd(ingress, {task_result.id: enqueued_ms})
        pipe.zremrangebyscore(ingress, "-inf", f"({enqueued_ms - self.result_ttl_ms}")
        try:
            self._execute(pipe)
        except PartitionFull:
            # A command refused when EXEC runs it stops none of the others:
            # take back the record and ingress entry of a task never queued.
            undo = self.client.pipeline(transaction=True)
            undo.delete(record)
            undo.zrem(ingress, task_result.id)
            self._execute(undo)
            raise
        task_enqueued.send(type(self), task_result=task_result)
        return task_result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's record, READY, RUNNING, SUCCESSFUL or FAILED (one GET per queue, pipelined)."""
        names = sorted(self.queues)
        pipe = self.client.pipeline(transaction=False)
        for queue_name in names:
            pipe.get(self._record_key(queue_name, result_id))
        for data in self._execute(pipe):
            if data:
                return self.deserialize_task_result(decode(data))
        raise TaskResultDoesNotExist(f"Task result {result_id!r} does not exist.")

    # threadmill's executor API.
    def acquire(
        self,
        *queue_names: str,
        timeout: datetime.timedelta | None = None,
        worker: str = "",
    ) -> TaskResult:
        """Lease the next task of the queues (in their order), RUNNING, its lease renewed while held.

        Each queue is tried without blocking first; then, until `timeout`,
        LEASE ... BLOCK watches them in turn (the whole timeout for one
        queue, 0.25 s slices for several). Raises TimeoutError when nothing
        came within `timeout`; with no timeout (None, as threadmill's Redis
        backend reads it) one try only, then queue.Empty. The lease is this
        thread's: `acknowledge` it from the same thread.
        """
        names = queue_names or tuple(sorted(self.queues))
        for queue_name in names:
            self._check_queue(queue_name)
        deadline = time.monotonic() + timeout.total_seconds() if timeout else None
        turn = 0
        while True:
            try:
                for queue_name in names:
                    if (found := self._lease_one(queue_name, None, worker)) is not None:
                        return found
                if deadline is None:
                    raise queue_module.Empty("No task available.")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("No task available within the specified timeout.")
                watched = names[turn % len(names)]
                turn += 1
                wait = remaining if len(names) == 1 else min(remaining, _BLOCK_SLICE_SECONDS)
                if (
                    found := self._lease_one(watched, max(1, int(wait * 1000)), worker)
                ) is not None:
                    return found
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
                # A lease granted while the reply was lost expires and comes back.
                logger.warning("vtrr: acquire from %s failed: %s", names, error)
                if deadline is None:
                    raise queue_module.Empty(f"No task available ({error}).") from error
                time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"No task available ({error}).") from error

    def _lease_one(self, queue_name: str, block_ms: int | None, worker: str) -> TaskResult | None:
        vtrr_queue = self.queue(queue_name)
        lease = vtrr_queue.lease(self.lease_ms, block_ms=block_ms)
        if lease is None:
            return None
        try:
            ready = self.deserialize_task_result(decode(lease.payload))
        except Exception:
            # Its function is gone or the payload is not a TaskResult: it can
            # never run, so it goes to the dead letters (VTRR.DEAD shows it).
            logger.exception(
                "vtrr: task %s of %s cannot be loaded: dead-lettered", lease.id, vtrr_queue.name
            )
            vtrr_queue.nack(lease, dead=True)
            self.client.pexpire(self._record_key(queue_name, lease.id), self.result_ttl_ms)
            return None
        running = self._mark_running(queue_name, ready, worker)
        if running is None:
            # A finished record: this lease was granted before a later run
            # finished it (this worker stalled longer than the lease). Drop it.
            logger.warning("vtrr: task %s already finished: stale lease dropped", lease.id)
            vtrr_queue.ack(lease)
            return None
        lost = self._heartbeat(queue_name).track(lease)
        with self._lock:
            self._held[running.id, threading.get_ident()] = _Held(
                queue_name, vtrr_queue, lease, lost
            )
        return running

    def _mark_running(self, queue_name: str, ready: TaskResult, worker: str) -> TaskResult | None:
        """Write the RUNNING record (worker_ids carried over from earlier attempts), unless finished."""
        key = self._record_key(queue_name, ready.id)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    data = pipe.get(key)
                    previous = ready
                    if data:
                        try:
                            previous = self.deserialize_task_result(decode(data))
                        except Exception:
                            logger.exception(
                                "vtrr: record of task %s unreadable: rewritten", ready.id
                            )
                    if previous.status in _FINISHED:
                        pipe.unwatch()
                        return None
                    now = timezone.now()
                    running = dataclasses.replace(
                        ready,
                        status=TaskResultStatus.RUNNING,
                        started_at=previous.started_at or now,
                        last_attempted_at=now,
                        worker_ids=[*previous.worker_ids, worker],
                        errors=list(previous.errors),
                    )
                    pipe.multi()
                    # No TTL while leased (enqueue says why): SET drops any TTL the
                    # record had (one an earlier version of this backend wrote).
                    pipe.set(key, self.serialize_task_result(running))
                    pipe.execute()
                    return running
                except redis.exceptions.WatchError:
                    continue

    def _heartbeat(self, queue_name: str) -> Heartbeat:
        """The queue's Heartbeat (fork-safe: a forked worker process renews its own leases)."""
        vtrr_queue = self.queue(queue_name)
        with self._lock:
            heartbeat = self._heartbeats.get(queue_name)
            if heartbeat is None:
                heartbeat = self._heartbeats[queue_name] = Heartbeat(vtrr_queue, self.lease_ms)
            return heartbeat

    def acknowledge(self, task_result: TaskResult) -> None:
        """Store the finished result and ACK its lease, in one MULTI, if the lease is still this run's.

        A fenced RENEW first: it fails when the lease was lost (expired and
        reclaimed, so the task runs, or ran, again): this run's result is
        dropped, a newer run's is never overwritten. It succeeds otherwise
        and gives the MULTI a whole lease to land in. FAILED is final too
        (Django's tasks have no retries): ACKed like SUCCESSFUL.

        The lease is the one this thread acquired: when another thread of
        this process leased the task again after this thread's lease
        expired, this call is a no-op and that thread's call records its run.
        """
        if task_result.status not in _FINISHED:
            raise ValueError(
                f"acknowledge needs a SUCCESSFUL or FAILED TaskResult, not {task_result.status}"
            )
        with self._lock:
            held = self._held.pop((task_result.id, threading.get_ident()), None)
        if held is None:
            raise ValueError(
                f"task {task_result.id} was not acquired by this backend in this thread: "
                "no lease to acknowledge"
            )
        self._heartbeat(held.queue_name).untrack(held.lease)
        if held.lost.is_set() or not held.queue.renew(held.lease, self.lease_ms):
            logger.warning(
                "vtrr: the lease of task %s was lost before it finished (%s): "
                "its result is dropped, the run that holds the task now records its own",
                task_result.id,
                task_result.status,
            )
            return
        try:
            serialized = self.serialize_task_result(task_result)
        except (TypeError, ValueError) as error:
            task_result = dataclasses.replace(
                task_result,
                status=TaskResultStatus.FAILED,
                errors=[*task_result.errors, _task_error(error)],
                finished_at=task_result.finished_at or timezone.now(),
            )
            serialized = self.serialize_task_result(task_result)
        queue_name = held.queue_name
        finished_ms = (task_result.finished_at or timezone.now()).timestamp() * 1000
        finished = self._finished_key(queue_name, task_result.status)
        pipe = self.client.pipeline(transaction=True)
        pipe.execute_command(*commands.ack(held.queue.name, held.lease).args)
        pipe.set(self._record_key(queue_name, task_result.id), serialized, px=self.result_ttl_ms)
        pipe.zadd(finished, {task_result.id: finished_ms})
        pipe.zremrangebyscore(finished, "-inf", f"({finished_ms - self.result_ttl_ms}")
        acked = int(self._execute(pipe)[0])
        if acked == 0:
            logger.warning(
                "vtrr: task %s was cancelled while it finished: its result is stored anyway",
                task_result.id,
            )

    def execute(self, task_result: TaskResult) -> TaskResult:
        """Run an acquired task: the SUCCESSFUL or FAILED TaskResult, with the signals threadmill sends."""
        task_started.send(type(self), task_result=task_result)
        task = task_result.task
        try:
            args = list(task_result.args)
            if task.takes_context:
                args = [TaskContext(task_result=task_result), *args]
            if iscoroutinefunction(task.func):
                value = asyncio.run(task.func(*args, **task_result.kwargs))
            else:
                value = task.func(*args, **task_result.kwargs)
            return_value = normalize_json(value)
        except Exception as exception:
            task_result = dataclasses.replace(
                task_result,
                status=TaskResultStatus.FAILED,
                errors=[*task_result.errors, _task_error(exception)],
                finished_at=timezone.now(),
            )
            logger.exception("vtrr: task %s failed", task_result.id)
        else:
            task_result = dataclasses.replace(
                task_result, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
            )
            object.__setattr__(task_result, "_return_value", return_value)
        # Sent outside the `except`, as threadmill's worker does: Django's own
        # receiver logs the exception being handled, which would print the
        # traceback logged above a second time.
        task_finished.send(type(self), task_result=task_result)
        return task_result

    # Inspection (threadmill's inspector): telemetry.py.
    def peek(
        self,
        queue_name: str = DEFAULT_TASK_QUEUE_NAME,
        *,
        status: TaskResultStatus,
        count: int = 1,
    ) -> Generator[TaskResult]:
        """Up to `count` (0: all) tasks of a queue in one status (see `telemetry.peek`)."""
        return telemetry.peek(self, queue_name, status=status, count=count)

    def telemetry(
        self, *, interval: datetime.timedelta = datetime.timedelta(seconds=60)
    ) -> BackendTelemetry:
        """Counts and rates per queue (see `telemetry.telemetry`)."""
        return telemetry.telemetry(self, interval=interval)

    def close(self) -> None:
        """Stop this process's lease renewals and close the Redis connections."""
        with self._lock:
            heartbeats = list(self._heartbeats.values())
            self._heartbeats = {}
        for heartbeat in heartbeats:
            heartbeat.stop()
        self.client.close()
