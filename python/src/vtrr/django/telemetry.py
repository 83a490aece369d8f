"""What threadmill's inspector reads: `peek` (tasks of a queue in one status) and
`telemetry` (counts from VTRR.STATS and the result sets, ingress and egress rates)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Collection, Generator
from typing import Any, Protocol, cast

import redis
from django.tasks import TaskResult, TaskResultStatus
from threadmill.backends.base import BackendTelemetry, QueueCounts, QueueRates, QueueStats

from ..client import Queue
from ..types import decode


class Source(Protocol):
    """What `peek` and `telemetry` read of a `VTRRBackend` (a Protocol: the
    backend imports this module)."""

    @property
    def queues(self) -> Collection[str]: ...

    @property
    def client(self) -> redis.Redis | redis.RedisCluster: ...

    @property
    def result_ttl_ms(self) -> int: ...

    def queue(self, queue_name: str) -> Queue: ...

    def deserialize_task_result(self, data: str) -> TaskResult: ...

    def _check_queue(self, queue_name: str) -> None: ...

    def _key(self, queue_name: str, suffix: str) -> str: ...

    def _record_key(self, queue_name: str, result_id: str) -> str: ...

    def _finished_key(self, queue_name: str, status: TaskResultStatus) -> str: ...

    def _execute(self, pipe: Any) -> list[Any]: ...


def inspected_ids(reply: Any) -> list[str]:
    """The members of a flat member, score array (VTRR.INSPECT of a sorted set), in order."""
    flat = list(reply or [])
    return [decode(flat[i]) for i in range(0, len(flat), 2)]


def peek(
    backend: Source,
    queue_name: str,
    *,
    status: TaskResultStatus,
    count: int = 1,
) -> Generator[TaskResult]:
    """Up to `count` (0: all) tasks of a queue in one status.

    READY: in the order they would be served (VTRR.INSPECT of `queue`,
    then the held items of paused or capped partitions): O(N) in the
    queued tasks, a diagnostic. RUNNING: by lease expiry (VTRR.INSPECT of
    `inflight`, O(running)). SUCCESSFUL, FAILED: oldest first, within
    `result_ttl`. Deferred tasks are not READY (telemetry counts them).
    """
    backend._check_queue(queue_name)
    vtrr_queue = backend.queue(queue_name)
    stop = count - 1 if count > 0 else -1
    match status:
        case TaskResultStatus.READY:
            ids = inspected_ids(vtrr_queue.inspect("queue"))
            if count <= 0 or len(ids) < count:
                held = list(vtrr_queue.inspect("held_at") or [])
                pairs = sorted((int(held[i + 1]), decode(held[i])) for i in range(0, len(held), 2))
                ids += [item_id for _, item_id in pairs]
        case TaskResultStatus.RUNNING:
            ids = inspected_ids(vtrr_queue.inspect("inflight"))
        case TaskResultStatus.SUCCESSFUL | TaskResultStatus.FAILED:
            key = backend._finished_key(queue_name, status)
            members = cast(list[bytes], backend.client.zrange(key, 0, stop))
            ids = [decode(member) for member in members]
        case _:
            raise ValueError(f"unknown status {status!r}")
    if count > 0:
        ids = ids[:count]
    if not ids:
        return
    pipe = backend.client.pipeline(transaction=False)
    for item_id in ids:
        pipe.get(backend._record_key(queue_name, item_id))
    for data in backend._execute(pipe):
        if data:
            yield backend.deserialize_task_result(decode(data))


def telemetry(
    backend: Source, *, interval: datetime.timedelta = datetime.timedelta(seconds=60)
) -> BackendTelemetry:
    """Counts from VTRR.STATS (queued → ready, inflight → running, delayed → deferred)
    and the result sets; ingress and egress over `interval` from the time-scored sets."""
    now_ms = time.time() * 1000
    window = f"({now_ms - interval.total_seconds() * 1000}"
    retention = f"({now_ms - backend.result_ttl_ms}"
    queues: dict[str, QueueStats] = {}
    for queue_name in sorted(backend.queues):
        stats = backend.queue(queue_name).stats()
        successful = backend._key(queue_name, "successful")
        failed = backend._key(queue_name, "failed")
        ingress = backend._key(queue_name, "ingress")
        pipe = backend.client.pipeline(transaction=False)
        for key in (successful, failed, ingress):
            pipe.zremrangebyscore(key, "-inf", retention)
        pipe.zcard(successful)
        pipe.zcard(failed)
        pipe.zcount(ingress, window, "+inf")
        pipe.zcount(successful, window, "+inf")
        pipe.zcount(failed, window, "+inf")
        _, _, _, done, dead, came, went_ok, went_failed = (int(n) for n in backend._execute(pipe))
        queues[queue_name] = QueueStats(
            counts=QueueCounts(
                ready=stats.queued,
                running=stats.inflight,
                deferred=stats.delayed,
                successful=done,
                failed=dead,
            ),
            rates=QueueRates(interval=interval, ingress=came, egress=went_ok + went_failed),
        )
    return BackendTelemetry(queues=queues)
