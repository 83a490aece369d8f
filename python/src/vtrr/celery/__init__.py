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
4. Return: `VTRR.ACK`. An `Exception` (Celery's FAILURE, its retries spent
   or none asked for): not run again, as in Celery and vtrr-queue, but not
   dropped either: `VTRR.NACK ... DEAD REASON <the exception and its
   traceback>`, so `VTRR.DEAD` (`vtrr dead`) lists it with what failed and
   `VTRR.REVIVE` runs it again. `SystemExit` and other `BaseException`s
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
   `VTRR.REVIVE` brings it back) rather than dropped.
8. The worker's log tells runs by their items: Celery's line of a run names
   the item's id (what `.queue()` returned) where it would name the trigger
   message's, and triggers that found nothing to run, and every trigger's
   "received", are not logged (`running.TriggerLog`). A start trigger of
   vtrr-queue 0.1.0 (`is_start`, sent before its items land) that finds the
   queue empty gets the one delayed second chance 0.1.0's workers give it.

The package, by concern: `queue` (VTRRQueue: vtrr-queue's API), `task` (the
Celery task base and the `@task` wrapper), `running` (one trigger run),
`codec` (payloads and the retry envelope), `broker` (triggers in kombu's
Redis keys).
"""

from __future__ import annotations

try:
    import celery  # noqa: F401  (the import below needs it; say what to install)
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("vtrr.celery needs Celery: pip install 'vtrr[celery]'") from error

from .codec import Payload, TaskSpec, encode_payload
from .queue import VTRRQueue
from .task import ALLOWED_TASK_OPTIONS, VTRRCeleryTask, VTRRTask

__all__ = [
    "ALLOWED_TASK_OPTIONS",
    "Payload",
    "TaskSpec",
    "VTRRCeleryTask",
    "VTRRQueue",
    "VTRRTask",
    "encode_payload",
]
