"""`VTRRQueue`: vtrr-queue 0.2's queue object (constructor, `@task`, reclaim and the
low-level `_dequeue`) over a `vtrr.Queue`."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, Concatenate, overload

import redis

from ..client import Queue
from ..heartbeat import Heartbeat
from .broker import Triggers
from .codec import Delivery, Payload
from .running import log_triggers
from .task import ALLOWED_TASK_OPTIONS, VTRRTask, resolve_base

logger = logging.getLogger("vtrr.celery")


class VTRRQueue:
    """vtrr-queue 0.2's `VTRRQueue` over the vtrr module's commands.

    `redis_client` points at the queue's database (the module loaded);
    `celery_app.conf.broker_url` is read to count the triggers waiting in a
    Redis broker. `lease_seconds` (int or float) is the lease each run takes
    and renews; `reclaim_interval` (seconds) registers the task
    `vtrr_queue.reclaim.<name>` and merges its Celery Beat entry, sent to
    `reclaim_queue` (None: the default queue).
    """

    DEFAULT_MAX_CONCURRENCY = 4

    def __init__(
        self,
        redis_client: redis.Redis,
        celery_app: Any,
        *,
        name: str,
        celery_queue: str = "vtrr_queue",
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        lease_seconds: float = 3900,
        reclaim_interval: float | None = None,
        reclaim_queue: str | None = None,
    ) -> None:
        if not name:
            raise ValueError("name must not be empty")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
            raise TypeError("max_concurrency must be an int")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        lease_ms = round(lease_seconds * 1000)
        if not 1 <= lease_ms <= 315_360_000_000:
            raise ValueError("lease_seconds must be between 0.001 and 315360000")
        if reclaim_interval is not None and reclaim_interval <= 0:
            raise ValueError("reclaim_interval must be positive (or None)")
        self.name = name
        self.queue = Queue(redis_client, name)
        """The vtrr queue underneath: STATS, DEAD, LIMIT, PAUSE... (see vtrr.Queue)."""
        self.celery_queue = celery_queue
        self.max_concurrency = max_concurrency
        self.lease_seconds = lease_seconds
        self.lease_ms = lease_ms
        self.reclaim_interval = reclaim_interval
        self.reclaim_queue = reclaim_queue
        self._redis = redis_client
        self._celery_app = celery_app
        self._task: VTRRTask[..., Any] | None = None
        self._lock = threading.Lock()
        self._heartbeat = Heartbeat(self.queue, self.lease_ms)
        self.triggers = Triggers(celery_app, celery_queue, name, max_concurrency)
        """The triggers this queue counts in the broker and sends."""
        if reclaim_interval is not None:
            self._register_reclaim_task()
            conf = celery_app.conf
            conf.beat_schedule = {**(conf.beat_schedule or {}), **self.reclaim_beat_schedule()}

    def __repr__(self) -> str:
        return f"VTRRQueue({self.name!r}, celery_queue={self.celery_queue!r})"

    # ------------------------------------------------------------------
    # The decorator
    # ------------------------------------------------------------------

    @overload
    def task[**P, R](self, fn: Callable[Concatenate[Any, P], R], /) -> VTRRTask[P, R]: ...

    @overload
    def task[**P, R](
        self, fn: None = None, /, **task_options: Any
    ) -> Callable[[Callable[Concatenate[Any, P], R]], VTRRTask[P, R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **task_options: Any) -> Any:
        """Register the function as this queue's Celery task (bound: `self` first).

        Accepts `ALLOWED_TASK_OPTIONS` (anything else: TypeError, at
        decoration). One task per queue: a second raises ValueError.
        """
        unsupported = set(task_options) - ALLOWED_TASK_OPTIONS - {"bind"}
        if unsupported:
            raise TypeError(
                f"@vtrr.task does not support option(s): {', '.join(sorted(unsupported))}. "
                f"Allowed: {', '.join(sorted(ALLOWED_TASK_OPTIONS))}"
            )
        if task_options.get("bind", True) is not True:
            raise TypeError("@vtrr.task is always bound (self first): bind must be True")

        def decorator(f: Callable[..., Any]) -> VTRRTask[..., Any]:
            return self._register(f, dict(task_options))

        return decorator if fn is None else decorator(fn)

    def _register(self, f: Callable[..., Any], options: dict[str, Any]) -> VTRRTask[..., Any]:
        if not callable(f):
            raise TypeError(f"@vtrr.task decorates a function, not {f!r}")
        with self._lock:
            if self._task is not None:
                raise ValueError(
                    f"VTRRQueue {self.name!r} already runs {self._task.name}: one task per queue "
                    "(every trigger runs whatever item is next); create another VTRRQueue, "
                    "with its own name and celery_queue, for another task"
                )
            options.pop("bind", None)
            base = resolve_base(options.pop("base", None))
            task_name = f"{f.__module__}.{f.__name__}"

            def run(celery_task: Any, task_payload: Any = None, is_start: bool = False) -> Any:
                delivery = getattr(celery_task.request, "vtrr_delivery", None)
                if not isinstance(delivery, Delivery):
                    raise RuntimeError(f"{task_name} runs only as a vtrr trigger (no item leased)")
                return f(celery_task, *delivery.payload.args, **delivery.payload.kwargs)

            run.__name__ = f.__name__
            run.__qualname__ = getattr(f, "__qualname__", f.__name__)
            run.__module__ = f.__module__
            run.__doc__ = f.__doc__
            celery_task = self._celery_app.task(
                name=task_name, bind=True, base=base, _vtrr_queue=self, **options
            )(run)
            log_triggers(task_name)
            wrapped: VTRRTask[..., Any] = VTRRTask(f, self, celery_task)
            self._task = wrapped
            return wrapped

    # ------------------------------------------------------------------
    # Public operations
    # ------------------------------------------------------------------

    def ack(self, task_id: str, token: str) -> bool:
        """Fenced ACK: False if the lease already expired (or was re-granted); harmless."""
        return self.queue.ack(_Fence(task_id, token)) == 1

    def reclaim(self) -> int:
        """Take expired leases back now; how many. (The module's timer does it anyway.)"""
        return self.queue.reclaim()

    def reclaim_and_dispatch(self) -> int:
        """Reclaim expired leases, then send triggers for what is waiting; how many were sent.

        Up to max_concurrency minus the triggers already in the broker. The
        module's timer reclaims by itself: what this adds is the wake-up, for
        items nobody holds a trigger for (a worker that died with its
        prefetched triggers, an expired lease on an idle queue).
        """
        reclaimed = self.reclaim()
        if reclaimed:
            logger.info("vtrr %s: reclaimed %d expired lease(s)", self.name, reclaimed)
        if self._task is None:
            logger.warning(
                "vtrr %s: no @task registered in this process: reclaimed, nothing dispatched",
                self.name,
            )
            return 0
        return self.triggers.send(
            None if self._task is None else self._task.celery_task, self._leasable()
        )

    def reclaim_beat_schedule(self) -> dict[str, dict[str, Any]]:
        """The Celery Beat entry of the reclaim task ({} without `reclaim_interval`)."""
        if self.reclaim_interval is None:
            return {}
        entry: dict[str, Any] = {
            "task": self.reclaim_task_name,
            "schedule": float(self.reclaim_interval),
        }
        if self.reclaim_queue is not None:
            entry["options"] = {"queue": self.reclaim_queue}
        return {self.reclaim_task_name: entry}

    @property
    def reclaim_task_name(self) -> str:
        return f"vtrr_queue.reclaim.{self.name}"

    def _register_reclaim_task(self) -> None:
        owner = self

        def reclaim_and_dispatch() -> int:
            return owner.reclaim_and_dispatch()

        reclaim_and_dispatch.__qualname__ = f"VTRRQueue.reclaim_and_dispatch[{self.name}]"
        self._celery_app.task(name=self.reclaim_task_name, ignore_result=True)(reclaim_and_dispatch)

    def _dequeue(self) -> tuple[str, list[Any], dict[str, Any], str, str, int] | None:
        """Lease the next item: `(task_name, args, kwargs, task_id, token, timeouts)` or None.

        The low-level API of vtrr-queue 0.2: ack it with `ack(task_id, token)`
        in a finally. Nothing renews this lease. An item whose payload is not
        vtrr-queue's JSON is dead-lettered (VTRR.DEAD lists it) and skipped.
        """
        delivery = self._lease_next(expected=None)
        if delivery is None or delivery.lease is None:
            return None
        p, lease = delivery.payload, delivery.lease
        return p.task_name, p.args, p.kwargs, lease.id, lease.token, lease.timeouts

    # ------------------------------------------------------------------
    # Internal: Redis operations
    # ------------------------------------------------------------------

    def _leasable(self) -> int:
        """Items a LEASE could serve now.

        Queued ones, minus those held back by tenant controls (a paused or
        capped partition), plus expired leases the timer has not reclaimed
        yet (a LEASE reclaims them first).
        """
        stats = self.queue.stats()
        return max(0, stats.queued - stats.held + stats.expired)

    def _lease_next(self, expected: str | None) -> Delivery | None:
        while True:
            lease = self.queue.lease(self.lease_ms)
            if lease is None:
                return None
            payload = Payload.decode(lease.payload)
            if payload is not None and (expected is None or payload.task_name == expected):
                return Delivery(payload, lease)
            reason = (
                "is not vtrr-queue's JSON payload"
                if payload is None
                else f"is for task {payload.task_name!r}, not {expected!r}"
            )
            logger.error("vtrr %s: item %s %s: dead-lettered", self.name, lease.id, reason)
            self.queue.nack(lease, dead=True, reason=f"vtrr.celery: its payload {reason}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Fence:
    id: str
    token: str
