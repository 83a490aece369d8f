"""`vtrr.celery`: vtrr-queue 0.2's Celery API, running on the module's commands.

A drop-in for `vtrr_queue.VTRRQueue` (0.2.0): the same constructor, the same
`@queue.task` decorator and `task.queue(partition_key=..., tasks=[...])`,
the same Redis keys (`vtrr:<name>:*`) and the same item payload
(`{"task_name": ..., "args": [...], "kwargs": {...}}`), so items enqueued by
vtrr-queue's Lua scripts run here and the other way round (keys layout; a
native queue is one key the scripts cannot touch). What changes is
underneath: one `VTRR.ENQUEUE` per `.queue()`, `VTRR.LEASE`/`ACK`/`RENEW`
per run, and the server's timer reclaiming expired leases by itself.

How a run goes (the Celery task registered under the function's name is the
"trigger": its message carries no item, only the wake-up):

1. The trigger leases the next item fairly (`VTRR.LEASE`, `lease_seconds`).
2. It calls the function with the bound task as `self`; `self.request`
   carries `vtrr_timeouts`, `vtrr_nacks`, `vtrr_task_id` and
   `vtrr_lease_lost` (a `threading.Event`, set when the lease was lost).
3. While it runs, a `vtrr.heartbeat.Heartbeat` renews the lease about every
   third of `lease_seconds`, so a task may run longer than its lease.
4. Return or `Exception`: `VTRR.ACK` (vtrr-queue's semantics: a failed
   task is not redelivered). `SystemExit` and other `BaseException`s
   (billiard's hard time limit): no ACK; the lease expires, the timer
   reclaims the item and it runs again with `vtrr_timeouts` one higher.
   A lease found lost (a RENEW or the ACK replied 0) is never acked again.
5. `self.retry()` / `autoretry_for` keep the lease: the run renews it once
   more and does not ack; the retry message carries the lease, and the
   retry run renews it (fenced) and acks when done. If the lease was lost
   meanwhile (a countdown longer than `lease_seconds`), the item belongs to
   a newer delivery and the retry run is dropped.
6. After every trigger run, if more items wait than triggers do in the
   broker, one more trigger is sent (vtrr-queue's chain). Expired leases
   come back by the server's timer, and that chain wakes a worker for them
   while any trigger runs; on an otherwise idle queue (or once a dead
   worker took its prefetched triggers with it) only
   `reclaim_and_dispatch()` (Celery Beat with `reclaim_interval`, or any
   scheduler) or the next `.queue()` does.
7. An item whose payload is not vtrr-queue's JSON, or names another task,
   is dead-lettered (`VTRR.NACK ... DEAD`: `VTRR.DEAD` lists it,
   `VTRR.REVIVE` brings it back) rather than dropped. A start trigger of
   vtrr-queue 0.1.0 (`is_start`, sent before its items land) that finds the
   queue empty gets the one delayed second chance 0.1.0's workers give it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, Final, TypedDict, overload

import redis

try:
    from celery import Task
    from celery.exceptions import Retry
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("vtrr.celery needs Celery: pip install 'vtrr[celery]'") from error

from .client import Queue
from .errors import SerializationError
from .heartbeat import Heartbeat
from .limits import MAX_WEIGHT, check_int
from .types import Item, Lease

logger = logging.getLogger("vtrr.celery")

ALLOWED_TASK_OPTIONS: Final = frozenset(
    {
        # execution limits
        "soft_time_limit",
        "time_limit",
        # retry
        "max_retries",
        "default_retry_delay",
        "autoretry_for",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "retry_kwargs",
        # the Celery message of the trigger (leasing does not depend on them)
        "acks_late",
        "reject_on_worker_lost",
        # base class
        "base",
    }
)
"""The `@queue.task` options (vtrr-queue 0.2's list); any other is a TypeError.

`bind` is accepted too, as vtrr-queue's README says, but only as True: the
task is always bound.
"""

_TASK_KEYS: Final = frozenset({"weight", "args", "kwargs", "id"})
_START_RETRY_COUNTDOWN: Final = 3
"""vtrr-queue's second chance for a start trigger that found the queue empty."""
_RETRY_KEY: Final = "vtrr_lease"
"""Where a retry message's payload carries the lease it keeps."""


class TaskSpec(TypedDict, total=False):
    """One entry of `.queue(tasks=[...])`: every key is optional."""

    weight: int
    args: list[Any] | tuple[Any, ...]
    kwargs: Mapping[str, Any]
    id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Payload:
    """An item's payload: vtrr-queue's JSON `{"task_name", "args", "kwargs"}`."""

    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]

    def encode(self) -> str:
        """The JSON vtrr-queue writes (same keys, order and separators)."""
        return json.dumps({"task_name": self.task_name, "args": self.args, "kwargs": self.kwargs})

    @classmethod
    def decode(cls, raw: bytes | str | Mapping[str, Any]) -> Payload | None:
        """The payload, or None when it is not vtrr-queue's shape."""
        try:
            data = raw if isinstance(raw, Mapping) else json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, Mapping):
            return None
        name, args, kwargs = data.get("task_name"), data.get("args", []), data.get("kwargs", {})
        if not isinstance(name, str) or not isinstance(args, list):
            return None
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            return None
        return cls(name, args, kwargs)


def encode_payload(task_name: str, args: object = (), kwargs: object = None) -> str:
    """An item's payload as vtrr-queue writes it; SerializationError if it cannot be.

    `args` must be a list or tuple, `kwargs` a mapping with str keys, and
    both JSON-serialisable (as vtrr-queue's `json.dumps`: tuples become lists).
    """
    if not isinstance(args, list | tuple):
        raise SerializationError(f"args must be a list or a tuple, not {type(args).__name__}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise SerializationError(f"kwargs must be a mapping, not {type(kwargs).__name__}")
    bad_keys = [key for key in kwargs if not isinstance(key, str)]
    if bad_keys:
        raise SerializationError(f"kwargs keys must be str, not {bad_keys[0]!r}")
    payload = Payload(task_name, list(args), dict(kwargs))
    try:
        return payload.encode()
    except (TypeError, ValueError, RecursionError) as error:
        raise SerializationError(f"task arguments are not JSON-serialisable: {error}") from error


@dataclasses.dataclass(slots=True)
class _Delivery:
    """One run of the task: the item's payload and the lease it runs under."""

    payload: Payload
    lease: Lease | None
    """None only for a vtrr-queue 0.1.0 retry message (its item has no lease)."""
    lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    retrying: bool = False
    """Set by `self.retry()` once the retry is being sent: the run keeps the lease."""

    def retry_payload(self) -> dict[str, Any]:
        """What the retry message carries: the payload and the lease it keeps."""
        body: dict[str, Any] = {
            "task_name": self.payload.task_name,
            "args": self.payload.args,
            "kwargs": self.payload.kwargs,
        }
        if self.lease is not None:
            body[_RETRY_KEY] = {
                "id": self.lease.id,
                "token": self.lease.token,
                "timeouts": self.lease.timeouts,
                "nacks": self.lease.nacks,
            }
        return body

    @classmethod
    def from_retry(cls, body: Mapping[str, Any]) -> _Delivery | None:
        payload = Payload.decode(body)
        if payload is None:
            return None
        kept = body.get(_RETRY_KEY)
        if kept is None:
            return cls(payload, None)
        if not isinstance(kept, Mapping):
            return None
        try:
            lease = Lease(
                id=str(kept["id"]),
                payload=payload.encode().encode(),
                token=str(kept["token"]),
                timeouts=int(kept.get("timeouts", 0)),
                nacks=int(kept.get("nacks", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return cls(payload, lease)


class VTRRCeleryTask(Task):  # type: ignore[misc]  # celery is untyped
    """The base of every `@queue.task` trigger: runs the item's lease around the body.

    Woven first into the MRO of a user `base`, so its `__call__` and `retry`
    come before the user's. Only `retry(exc=..., countdown/eta, max_retries,
    throw, **options)` is honoured: a retry always re-runs this item with
    its own payload (the `args`/`kwargs` given to it are ignored, as in
    vtrr-queue).
    """

    _vtrr_queue: VTRRQueue | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = self._vtrr_queue
        if owner is None:
            return super().__call__(*args, **kwargs)
        return owner._execute(self, super().__call__, args, kwargs)

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        delivery = getattr(self.request, "vtrr_delivery", None)
        owner = self._vtrr_queue
        if not isinstance(delivery, _Delivery) or owner is None:
            return super().retry(
                args=args,
                kwargs=kwargs,
                exc=exc,
                throw=throw,
                eta=eta,
                countdown=countdown,
                max_retries=max_retries,
                **options,
            )
        options.setdefault("queue", owner.celery_queue)
        delivery.retrying = True
        try:
            return super().retry(
                args=(),
                kwargs={"task_payload": delivery.retry_payload()},
                exc=exc,
                throw=throw,
                eta=eta,
                countdown=countdown,
                max_retries=max_retries,
                **options,
            )
        except Retry:
            raise
        except BaseException:
            # Not retried after all (max_retries exceeded, the message not sent):
            # the run settles as a failure, acked.
            delivery.retrying = False
            raise


def _resolve_base(user_base: type | None) -> type:
    """Weave `VTRRCeleryTask` first into the user's own Task base."""
    if user_base is None or user_base is Task:
        return VTRRCeleryTask
    if not isinstance(user_base, type) or not issubclass(user_base, Task):
        raise TypeError(f"base must be a celery.Task subclass, not {user_base!r}")
    if issubclass(user_base, VTRRCeleryTask):
        return user_base
    return type(f"VTRR{user_base.__name__}", (VTRRCeleryTask, user_base), {})


class VTRRTask[**P, R]:
    """What `@queue.task` returns: the function, with `.queue()` to enqueue it."""

    def __init__(
        self, fn: Callable[Concatenate[Any, P], R], vtrr: VTRRQueue, celery_task: Any
    ) -> None:
        self._fn = fn
        self._vtrr = vtrr
        self._celery_task = celery_task
        self.__name__ = fn.__name__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__

    def __call__(self, task: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly (no queue): `task` is what `self` will be."""
        return self._fn(task, *args, **kwargs)

    @property
    def name(self) -> str:
        """The Celery task name and the payload's `task_name`: `<module>.<function>`."""
        return f"{self.__module__}.{self.__name__}"

    @property
    def celery_task(self) -> Any:
        """The registered Celery task (the trigger)."""
        return self._celery_task

    def queue(self, partition_key: str, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """Enqueue `tasks` for `partition_key` in one atomic `VTRR.ENQUEUE`; their ids.

        Each entry may hold `weight` (int, default 1), `args` (list),
        `kwargs` (dict) and `id` (default: a new UUID); any other key is a
        TypeError. Every payload is built first: arguments that cannot be
        JSON-serialised raise `SerializationError` and nothing is enqueued.
        An id already in the queue's life is skipped (the module's rule).
        Then min(max_concurrency - triggers already in the broker, items
        added) triggers are sent, as vtrr-queue does.
        """
        if not isinstance(partition_key, str):
            raise TypeError(f"partition_key must be a str, not {type(partition_key).__name__}")
        if not partition_key:
            raise ValueError("partition_key is required")
        items: list[Item] = []
        for index, spec in enumerate(tasks):
            items.append(self._item(partition_key, index, spec))
        if not items:
            return []
        added = self._vtrr._enqueue(items)
        self._vtrr._schedule_workers(added)
        return [item.id for item in items]

    def _item(self, partition_key: str, index: int, spec: Mapping[str, Any]) -> Item:
        if not isinstance(spec, Mapping):
            raise TypeError(f"tasks[{index}] must be a dict, not {type(spec).__name__}")
        unknown = set(spec) - _TASK_KEYS
        if unknown:
            raise TypeError(
                f"tasks[{index}] has unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                f"allowed: {', '.join(sorted(_TASK_KEYS))}"
            )
        raw_id = spec.get("id")
        task_id = str(uuid.uuid4()) if raw_id is None else str(raw_id)
        if not task_id:
            raise ValueError(f"tasks[{index}]: id must not be empty")
        try:
            weight = check_int("weight", spec.get("weight", 1), 1, MAX_WEIGHT)
        except (TypeError, ValueError) as error:
            raise type(error)(f"tasks[{index}]: {error}") from None
        try:
            payload = encode_payload(self.name, spec.get("args", []), spec.get("kwargs"))
        except SerializationError as error:
            raise SerializationError(f"tasks[{index}] (id {task_id}): {error}") from error
        return Item(partition_key, task_id, payload, weight)


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
        self._broker: redis.Redis | None = self._connect_broker()
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
            base = _resolve_base(options.pop("base", None))
            task_name = f"{f.__module__}.{f.__name__}"

            def run(celery_task: Any, task_payload: Any = None, is_start: bool = False) -> Any:
                delivery = getattr(celery_task.request, "vtrr_delivery", None)
                if not isinstance(delivery, _Delivery):
                    raise RuntimeError(f"{task_name} runs only as a vtrr trigger (no item leased)")
                return f(celery_task, *delivery.payload.args, **delivery.payload.kwargs)

            run.__name__ = f.__name__
            run.__qualname__ = getattr(f, "__qualname__", f.__name__)
            run.__module__ = f.__module__
            run.__doc__ = f.__doc__
            celery_task = self._celery_app.task(
                name=task_name, bind=True, base=base, _vtrr_queue=self, **options
            )(run)
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
        return self._schedule_workers(self._leasable())

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

    def _enqueue(self, items: list[Item]) -> int:
        return self.queue.enqueue_many(items)

    def _leasable(self) -> int:
        """Items a LEASE could serve now.

        Queued ones, minus those held back by tenant controls (a paused or
        capped partition), plus expired leases the timer has not reclaimed
        yet (a LEASE reclaims them first).
        """
        stats = self.queue.stats()
        return max(0, stats.queued - stats.held + stats.expired)

    def _lease_next(self, expected: str | None) -> _Delivery | None:
        while True:
            lease = self.queue.lease(self.lease_ms)
            if lease is None:
                return None
            payload = Payload.decode(lease.payload)
            if payload is not None and (expected is None or payload.task_name == expected):
                return _Delivery(payload, lease)
            reason = (
                "is not vtrr-queue's JSON payload"
                if payload is None
                else f"is for task {payload.task_name!r}, not {expected!r}"
            )
            logger.error("vtrr %s: item %s %s: dead-lettered", self.name, lease.id, reason)
            self.queue.nack(lease, dead=True)

    # ------------------------------------------------------------------
    # Internal: one run
    # ------------------------------------------------------------------

    def _execute(
        self,
        task: Any,
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The trigger's body around `call` (the task's own `__call__`)."""
        task_payload = kwargs.get("task_payload")
        if task_payload is not None:
            return self._run_retry(task, call, args, kwargs, task_payload)
        wrapped = self._task
        delivery = self._lease_next(expected=None if wrapped is None else wrapped.name)
        if delivery is None:
            if kwargs.get("is_start"):
                # A vtrr-queue 0.1.0 producer sends its start triggers before its
                # items land: give it the second chance its own workers give.
                task.apply_async(
                    kwargs={"is_start": False},
                    queue=self.celery_queue,
                    countdown=_START_RETRY_COUNTDOWN,
                )
            return None
        try:
            return self._run(task, call, args, kwargs, delivery)
        finally:
            self._schedule_next(task)

    def _run_retry(
        self,
        task: Any,
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        body: Any,
    ) -> Any:
        delivery = _Delivery.from_retry(body) if isinstance(body, Mapping) else None
        if delivery is None:
            logger.error("vtrr %s: a retry message without a readable payload: dropped", self.name)
            return None
        lease = delivery.lease
        if lease is not None and not self.queue.renew(lease, self.lease_ms):
            logger.warning(
                "vtrr %s: retry of %s dropped: its lease was lost during the retry delay "
                "(reclaimed: the item runs again under a newer delivery)",
                self.name,
                lease.id,
            )
            self._schedule_next(task)
            return None
        return self._run(task, call, args, kwargs, delivery)

    def _run(
        self,
        task: Any,
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        delivery: _Delivery,
    ) -> Any:
        lease = delivery.lease
        if lease is not None:
            delivery.lost = self._heartbeat.track(lease)
        # Explicit `headers`: Celery's Context otherwise turns unknown fields
        # (ours) into custom headers, which a retry message would carry.
        task.push_request(
            headers=dict(task.request.headers or {}),
            vtrr_delivery=delivery,
            vtrr_task_id=None if lease is None else lease.id,
            vtrr_timeouts=0 if lease is None else lease.timeouts,
            vtrr_nacks=0 if lease is None else lease.nacks,
            vtrr_lease_lost=delivery.lost,
        )
        settle = False
        try:
            result = call(*args, **kwargs)
            settle = True
            return result
        except Exception:
            settle = True
            raise
        finally:
            # BaseException (SystemExit from billiard's hard time limit, a cold
            # shutdown): settle stays False: no ACK, the lease expires and the
            # timer reclaims the item (one more timeout).
            task.pop_request()
            if lease is not None:
                self._heartbeat.untrack(lease)
                if settle:
                    self._settle(delivery, lease)

    def _settle(self, delivery: _Delivery, lease: Lease) -> None:
        try:
            if delivery.lost.is_set():
                logger.warning(
                    "vtrr %s: lease of %s was lost while it ran: not acked (it may run again)",
                    self.name,
                    lease.id,
                )
            elif delivery.retrying:
                # The retry keeps the lease: a full lease for the retry delay.
                if not self.queue.renew(lease, self.lease_ms):
                    logger.warning(
                        "vtrr %s: lease of %s lost as its retry was sent", self.name, lease.id
                    )
            elif self.queue.ack(lease) == 0:
                logger.warning(
                    "vtrr %s: ACK of %s found its lease lost (it may run again)",
                    self.name,
                    lease.id,
                )
        except Exception:
            # The result stands; an unacked lease expires and is reclaimed.
            logger.exception("vtrr %s: settling %s failed", self.name, lease.id)

    # ------------------------------------------------------------------
    # Internal: worker scheduling
    # ------------------------------------------------------------------

    def _connect_broker(self) -> redis.Redis | None:
        try:
            url = self._celery_app.conf.broker_url
            if isinstance(url, list | tuple):
                url = url[0] if url else None
            if isinstance(url, str):
                url = url.split(";")[0].strip()
            if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
                logger.info(
                    "vtrr %s: the Celery broker is not Redis (%r): triggers in it are not counted",
                    self.name,
                    url,
                )
                return None
            return redis.Redis.from_url(url)
        except Exception as error:
            logger.warning("vtrr %s: could not connect to the Celery broker: %s", self.name, error)
            return None

    def _broker_keys(self) -> list[str]:
        """The broker lists holding this celery_queue's messages, one per priority step.

        Kombu's Redis transport keeps priority p > 0 in `<queue><sep><p>`
        (sep `\\x06\\x16` unless `broker_transport_options` says otherwise),
        all behind `global_keyprefix`.
        """
        options = self._celery_app.conf.broker_transport_options or {}
        sep = str(options.get("sep", "\x06\x16"))
        steps = options.get("priority_steps") or (0, 3, 6, 9)
        prefix = str(options.get("global_keyprefix", "") or "")
        queue = prefix + self.celery_queue
        return [queue if step == 0 else f"{queue}{sep}{step}" for step in steps]

    def _get_workers_scheduled(self) -> int:
        """Triggers waiting in the broker (not those a worker already reserved).

        0 on any error, so the caller may over-schedule slightly: safe, a
        surplus trigger finds nothing and ends.
        """
        if self._broker is None:
            return 0
        try:
            pipe = self._broker.pipeline(transaction=False)
            for key in self._broker_keys():
                pipe.llen(key)
            return sum(int(n) for n in pipe.execute())
        except Exception as error:
            logger.error("vtrr %s: could not count triggers in the broker: %s", self.name, error)
            return 0

    def _schedule_workers(self, num_tasks: int) -> int:
        """Send min(max_concurrency - triggers in the broker, num_tasks) triggers."""
        wrapped = self._task
        if wrapped is None or num_tasks <= 0:
            return 0
        to_schedule = min(self.max_concurrency - self._get_workers_scheduled(), num_tasks)
        for _ in range(to_schedule):
            wrapped.celery_task.apply_async(queue=self.celery_queue)
        return max(0, to_schedule)

    def _schedule_next(self, trigger: Any) -> None:
        """One more trigger if items wait: vtrr-queue's chain (a run ended, one is sent).

        Not when the triggers already in the broker outnumber the waiting
        items: each of those leases one of them anyway.
        """
        try:
            waiting = self._leasable()
            if waiting > 0 and waiting > self._get_workers_scheduled():
                trigger.apply_async(queue=self.celery_queue)
        except Exception:
            logger.exception("vtrr %s: could not schedule the next trigger", self.name)


@dataclasses.dataclass(frozen=True, slots=True)
class _Fence:
    id: str
    token: str


__all__ = [
    "ALLOWED_TASK_OPTIONS",
    "Payload",
    "TaskSpec",
    "VTRRCeleryTask",
    "VTRRQueue",
    "VTRRTask",
    "encode_payload",
]
