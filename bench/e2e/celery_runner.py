"""Celery's runner for `make bench-e2e` (the `.bench/peers` venv), and the Celery app.

`python celery_runner.py fill` sends E2E_JOBS tasks (`apply_async`, one
LPUSH each) with a payload of E2E_PAYLOAD_BYTES to the queue `bench` of a
Redis broker; the driver then starts `celery -A celery_runner worker --pool
threads --concurrency N` on it (one process; mingle, gossip and heartbeat
off, as a Redis-broker deployment usually runs, no result backend). Tasks
ack late, after they return, as vtrr and BullMQ do; a job counts as settled
when Celery acknowledges it. Celery has no partitions: plain tasks.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from celery import Celery
from common import QUEUE, Probe, Settings, count_redis_py

settings = Settings.from_env()
app = Celery("bench", broker=settings.url)
app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=True,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
PAUSE = settings.sleep_ms / 1000
probe: Probe | None = None


@app.task(name="noop")
def noop(payload: str) -> None:
    assert probe is not None
    probe.start()
    if PAUSE:
        time.sleep(PAUSE)


def _measure() -> None:
    """In the worker process: count, and settle each job when Celery acks it."""
    global probe
    probe = Probe(settings.jobs, settings.warmup)
    count_redis_py(probe)
    from celery.worker.request import Request

    acknowledge = Request.acknowledge

    def counted_acknowledge(self: Request) -> None:
        first = not self.acknowledged
        acknowledge(self)
        if first and probe is not None and probe.settle():
            os.kill(os.getpid(), signal.SIGTERM)  # a warm shutdown: the queue is drained

    Request.acknowledge = counted_acknowledge  # type: ignore[method-assign]


def fill() -> None:
    payload = settings.payload
    for _ in range(settings.total):
        noop.apply_async(args=(payload,))


if os.environ.get("E2E_MODE") == "work":
    _measure()

if __name__ == "__main__":
    {"fill": fill}[sys.argv[1]]()
