"""One trigger run: lease the next item, call the task with it under a renewed lease,
settle (ACK, or keep the lease for a retry), chain the next trigger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..types import Lease
from .codec import Delivery
from .owner import Owner

logger = logging.getLogger("vtrr.celery")

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
            owner._heartbeat.untrack(lease)
            if settle:
                _settle(owner, delivery, lease)


def _settle(owner: Owner, delivery: Delivery, lease: Lease) -> None:
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
        elif owner.queue.ack(lease) == 0:
            logger.warning(
                "vtrr %s: ACK of %s found its lease lost (it may run again)",
                owner.name,
                lease.id,
            )
    except Exception:
        # The result stands; an unacked lease expires and is reclaimed.
        logger.exception("vtrr %s: settling %s failed", owner.name, lease.id)
