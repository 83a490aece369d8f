"""A `@queue.task` on the Celery side: the trigger task's base class (its run and
retry), the function's wrapper with `.queue()`, and the options vtrr-queue allows."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, Final, NoReturn

from celery import Task
from celery.exceptions import Retry

from ..errors import SerializationError
from ..limits import MAX_WEIGHT, check_int
from ..types import Item
from .codec import Delivery, encode_payload
from .owner import Owner
from .running import execute

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

TASK_KEYS: Final = frozenset({"weight", "args", "kwargs", "id"})
"""The keys of one `.queue(tasks=[...])` entry."""

CELERY_CALLS: Final = frozenset(
    {"delay", "apply_async", "apply", "s", "si", "signature", "map", "starmap", "chunks"}
)
"""Celery's ways of calling a task, which a `VTRRTask` has not: its items are
enqueued for a partition by `.queue()`; an AttributeError names it."""


class VTRRCeleryTask(Task):  # type: ignore[misc]  # celery is untyped
    """The base of every `@queue.task` trigger: runs the item's lease around the body.

    Woven first into the MRO of a user `base`, so its `__call__` and `retry`
    come before the user's. Only `retry(exc=..., countdown/eta, max_retries,
    throw, **options)` is honoured: a retry always re-runs this item with
    its own payload (the `args`/`kwargs` given to it are ignored, as in
    vtrr-queue).
    """

    _vtrr_queue: Owner | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = self._vtrr_queue
        if owner is None:
            return super().__call__(*args, **kwargs)
        return execute(owner, self, super().__call__, args, kwargs)

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
        if not isinstance(delivery, Delivery) or owner is None:
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


def resolve_base(user_base: type | None) -> type:
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

    def __init__(self, fn: Callable[Concatenate[Any, P], R], vtrr: Owner, celery_task: Any) -> None:
        self._fn = fn
        self._vtrr = vtrr
        self._celery_task = celery_task
        self.__name__ = fn.__name__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__

    def __call__(self, task: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly (no queue): `task` is what `self` will be."""
        return self._fn(task, *args, **kwargs)

    if not TYPE_CHECKING:  # type checkers keep reporting the attribute as missing

        def __getattr__(self, name: str) -> NoReturn:
            if name in CELERY_CALLS:
                raise AttributeError(
                    f"{type(self).__name__} {self.name} has no {name}(): every item belongs"
                    ' to a partition, so enqueue with .queue(partition_key, tasks=[{"args":'
                    ' [...], "kwargs": {...}}]); Celery\'s task (the trigger that runs the'
                    " next item) is .celery_task",
                    name=name,
                    obj=self,
                )
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
            )

    @property
    def name(self) -> str:
        """The Celery task name and the payload's `task_name`: `<module>.<function>`."""
        return f"{self.__module__}.{self.__name__}"

    @property
    def celery_task(self) -> Any:
        """The registered Celery task (the trigger)."""
        return self._celery_task

    def queue(
        self,
        partition_key: str,
        tasks: Iterable[Mapping[str, Any]],
        *,
        priority: int | None = None,
    ) -> list[str]:
        """Enqueue `tasks` for `partition_key` in one atomic `VTRR.ENQUEUE`; their ids.

        Each entry may hold `weight` (int, default 1), `args` (list),
        `kwargs` (dict) and `id` (default: a new UUID); any other key is a
        TypeError. Every payload is built first: arguments that cannot be
        JSON-serialised raise `SerializationError` and nothing is enqueued.
        An id already in the queue's life is skipped (the module's rule);
        tasks that would take the partition past its MAX-QUEUED raise
        `PartitionFull`, none of them enqueued and no trigger sent.
        Then min(max_concurrency - triggers already in the broker, items
        added) triggers are sent, as vtrr-queue does.

        `priority` is Celery's on its Redis transport: 0 to 9, 0 first, and
        no priority as 0. It maps to the module's level `-priority`, so the
        tasks are served in that order, strictly, and fairly between
        partitions inside each level.
        """
        level = 0 if priority is None else -check_int("priority", priority, 0, 9)
        if not isinstance(partition_key, str):
            raise TypeError(f"partition_key must be a str, not {type(partition_key).__name__}")
        if not partition_key:
            raise ValueError("partition_key is required")
        items: list[Item] = []
        for index, spec in enumerate(tasks):
            items.append(self._item(partition_key, index, spec))
        if not items:
            return []
        added = self._vtrr.queue.enqueue_many(items, priority=level)
        self._vtrr.triggers.send(self._celery_task, added)
        return [item.id for item in items]

    def _item(self, partition_key: str, index: int, spec: Mapping[str, Any]) -> Item:
        if not isinstance(spec, Mapping):
            raise TypeError(f"tasks[{index}] must be a dict, not {type(spec).__name__}")
        unknown = set(spec) - TASK_KEYS
        if unknown:
            raise TypeError(
                f"tasks[{index}] has unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                f"allowed: {', '.join(sorted(TASK_KEYS))}"
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
