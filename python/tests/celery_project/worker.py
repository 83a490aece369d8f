"""What `celery -A celery_project.worker worker` loads: the project, built from the environment."""

from __future__ import annotations

import os

from celery_project.project import build

reclaim = os.environ.get("VTRR_TEST_RECLAIM_INTERVAL")
app, queue, task = build(
    redis_url=os.environ["VTRR_TEST_REDIS_URL"],
    broker_url=os.environ["VTRR_TEST_BROKER_URL"],
    name=os.environ["VTRR_TEST_QUEUE"],
    celery_queue=os.environ["VTRR_TEST_CELERY_QUEUE"],
    lease_seconds=float(os.environ.get("VTRR_TEST_LEASE_SECONDS", "30")),
    reclaim_interval=float(reclaim) if reclaim else None,
)
