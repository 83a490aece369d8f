"""The project: `build()` makes a Celery app and a `VTRRQueue` running `job`.

The test process builds one to enqueue (the producer); the worker process
builds the same from its environment (`celery_project.worker`). `job` records
each run in the Redis list `done:<queue name>` (and `started:<queue name>`
when it starts), one JSON object per run, so a test reads what ran, in order.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery, Task

from vtrr.celery import VTRRQueue, VTRRTask


class TransientError(Exception):
    """What `autoretry_for` retries."""


_results: redis.Redis | None = None


def _record(self: Any, kind: str, job_id: str, **fields: Any) -> None:
    global _results
    if _results is None:
        _results = redis.Redis.from_url(os.environ["VTRR_TEST_REDIS_URL"])
    entry = {
        "id": job_id,
        "timeouts": self.request.vtrr_timeouts,
        "nacks": self.request.vtrr_nacks,
        "retries": self.request.retries,
        "item": self.request.vtrr_task_id,
        "pid": os.getpid(),
        **fields,
    }
    _results.rpush(f"{kind}:{os.environ['VTRR_TEST_QUEUE']}", json.dumps(entry))


def job(self: Any, job_id: str, action: str = "record", *rest: Any, **kwargs: Any) -> str:
    """One test job; `action` says what it does on its first delivery.

    record: nothing more. crash: the process dies (os._exit) while
    vtrr_timeouts is 0. sleep: sleeps kwargs["seconds"]. raise: raises
    ValueError. retry: self.retry(countdown=kwargs["countdown"]) on its first
    attempt of its first delivery. autoretry: raises TransientError on its first attempt.
    flaky: raises TransientError on every attempt (autoretry until max_retries).
    """
    first_delivery = self.request.vtrr_timeouts == 0
    _record(self, "started", job_id)
    if action == "crash" and first_delivery:
        os._exit(17)
    if action == "sleep":
        time.sleep(float(kwargs["seconds"]))
    fields = {
        "action": action,
        "rest": list(rest),
        "kwargs": kwargs,
        "task": self.name,
        "bound": isinstance(self, Task),
        "lost": self.request.vtrr_lease_lost.is_set(),
    }
    _record(self, "done", job_id, **fields)
    if action == "raise":
        raise ValueError(f"job {job_id} fails")
    if action == "retry" and first_delivery and self.request.retries == 0:
        raise self.retry(countdown=float(kwargs["countdown"]))
    if action == "autoretry" and self.request.retries == 0:
        raise TransientError(job_id)
    if action == "flaky":
        raise TransientError(f"{job_id} attempt {self.request.retries}")
    return job_id


def build(
    *,
    redis_url: str,
    broker_url: str,
    name: str,
    celery_queue: str,
    lease_seconds: float = 30,
    reclaim_interval: float | None = None,
    max_concurrency: int = 4,
) -> tuple[Celery, VTRRQueue, VTRRTask[..., str]]:
    app = Celery("celery_project", broker=broker_url)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=True,
    )
    queue = VTRRQueue(
        redis_client=redis.Redis.from_url(redis_url),
        celery_app=app,
        name=name,
        celery_queue=celery_queue,
        max_concurrency=max_concurrency,
        lease_seconds=lease_seconds,
        reclaim_interval=reclaim_interval,
        reclaim_queue=celery_queue if reclaim_interval is not None else None,
    )
    task = queue.task(
        autoretry_for=(TransientError,),
        retry_kwargs={"countdown": 0.2},
        max_retries=3,
    )(job)
    return app, queue, task
