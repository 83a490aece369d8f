"""One trigger run: lease the next item, call the task with it under a renewed lease,
settle (ACK, dead-letter a failure, or keep the lease for a retry), chain the next
trigger; and Celery's log lines of trigger runs, told as the items they ran."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import celery
from celery.exceptions import TaskPredicate

from ..types import Lease
from ..worker import failure_reason
from .codec import Delivery
from .owner import Owner

logger = logging.getLogger("vtrr.celery")

ITEM_FIELD: Final = "vtrr_item"
"""Set on the Celery request of a trigger run that ran an item: the item's id."""


class TriggerLog(logging.Filter):
    """Celery's log lines of the triggers of `names`, as the items they ran.

    A trigger is a wake-up, not a task: its "received" line says nothing
    (dropped), a run that found nothing to lease is no task run (its
    "succeeded ...: None" dropped), and the line of a run that ran an item
    names the item's id (what `.queue()` returned) in place of the
    trigger message's. Installed on Celery's loggers by `log_triggers`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        data = record.args
        if not isinstance(data, Mapping) or data.get("name") not in self.names:
            return True
        if record.name == "celery.worker.strategy":
            return False
        task = celery.current_task
        item = None if task is None else getattr(task.request, ITEM_FIELD, None)
        if item is None:
            return False
        record.args = {**data, "id": item}
        return True


_TRIGGER_LOG = TriggerLog()


def log_triggers(task_name: str) -> None:
    """Celery's log lines of `task_name`'s runs told as items (`TriggerLog`)."""
    _TRIGGER_LOG.names.add(task_name)
    for name in ("celery.app.trace", "celery.worker.strategy"):
        celery_logger = logging.getLogger(name)
        if _TRIGGER_LOG not in celery_logger.filters:
            celery_logger.addFilter(_TRIGGER_LOG)


START_RETRY_COUNTDOWN: Final = 3
"""vtrr-queue's second chance for a start trigger that found the queue empty."""


def execute(
    owner: Owner,
    task: Any,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The trigger's body around `call` (the task's own `__call__`)."""
    task_payload = kwargs.get("task_payload")
    if task_payload is not None:
        return _run_retry(owner, task, call, args, kwargs, task_payload)
    wrapped = owner._task
    delivery = owner._lease_next(expected=None if wrapped is None else wrapped.name)
    if delivery is None:
        if kwargs.get("is_start"):
            # A vtrr-queue 0.1.0 producer sends its start triggers before its
            # items land: give it the second chance its own workers give.
            task.apply_async(
                kwargs={"is_start": False},
                queue=owner.celery_queue,
                countdown=START_RETRY_COUNTDOWN,
            )
        return None
    try:
        return _run(owner, task, call, args, kwargs, delivery)
    finally:
        owner.triggers.chain(task, owner._leasable)


def _run_retry(
    owner: Owner,
    task: Any,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    body: Any,
) -> Any:
    delivery = Delivery.from_retry(body) if isinstance(body, Mapping) else None
    if delivery is None:
        logger.error("vtrr %s: a retry message without a readable payload: dropped", owner.name)
        return None
    lease = delivery.lease
    if lease is not None and not owner.queue.renew(lease, owner.lease_ms):
        logger.warning(
            "vtrr %s: retry of %s dropped: its lease was lost during the retry delay "
            "(reclaimed: the item runs again under a newer delivery)",
            owner.name,
            lease.id,
        )
        owner.triggers.chain(task, owner._leasable)
        return None
    return _run(owner, task, call, args, kwargs, delivery)


def _run(
    owner: Owner,
    task: Any,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    delivery: Delivery,
) -> Any:
    lease = delivery.lease
    # Celery's line for this run names the item (`TriggerLog`).
    setattr(task.request, ITEM_FIELD, task.request.id if lease is None else lease.id)
    if lease is not None:
        delivery.lost = owner._heartbeat.track(lease)
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
    failure: Exception | None = None
    try:
        result = call(*args, **kwargs)
        settle = True
        return result
    except TaskPredicate:
        # Retry (the lease is kept), Ignore, Reject: no failure of the item.
        settle = True
        raise
    except Exception as error:
        settle = True
        failure = error
        raise
    finally:
        # BaseException (SystemExit from billiard's hard time limit, a cold
        # shutdown): settle stays False: no ACK, the lease expires and the
        # timer reclaims the item (one more timeout).
        task.pop_request()
        if lease is not None:
            owner._heartbeat.untrack(lease)
            if settle:
                _settle(owner, delivery, lease, failure)


def _settle(owner: Owner, delivery: Delivery, lease: Lease, failure: Exception | None) -> None:
    """ACK; or for a task that raised (and is not retried: Celery does not run a
    failed task again unless it retries), `NACK ... DEAD REASON <traceback>`:
    VTRR.DEAD lists it with what failed, VTRR.REVIVE runs it again."""
    try:
        if delivery.lost.is_set():
            logger.warning(
                "vtrr %s: lease of %s was lost while it ran: not acked (it may run again)",
                owner.name,
                lease.id,
            )
        elif delivery.retrying:
            # The retry keeps the lease: a full lease for the retry delay.
            if not owner.queue.renew(lease, owner.lease_ms):
                logger.warning(
                    "vtrr %s: lease of %s lost as its retry was sent", owner.name, lease.id
                )
        elif failure is not None:
            went = owner.queue.nack(lease, dead=True, reason=failure_reason(failure))
            if went is None:
                logger.warning(
                    "vtrr %s: NACK of %s found its lease lost (it may run again)",
                    owner.name,
                    lease.id,
                )
            else:
                logger.warning(
                    "vtrr %s: %s (partition %s) failed (%r): dead-lettered "
                    "(VTRR.DEAD shows its error; VTRR.REVIVE runs it again)",
                    owner.name,
                    lease.id,
                    lease.partition,
                    failure,
                )
        elif owner.queue.ack(lease) == 0:
            logger.warning(
                "vtrr %s: ACK of %s found its lease lost (it may run again)",
                owner.name,
                lease.id,
            )
    except Exception:
        # The result stands; an unacked lease expires and is reclaimed.
        logger.exception("vtrr %s: settling %s failed", owner.name, lease.id)
