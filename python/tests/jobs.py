"""Handlers the suites run in real `vtrr worker` processes.

Each records what it did in the Redis list `done:<queue>` of the server in
`VTRR_URL`, so a test reads the order of completions.
"""

from __future__ import annotations

import os
import time

import redis

import vtrr

_client = redis.Redis.from_url(os.environ.get("VTRR_URL", "redis://127.0.0.1:6379/0"))


def record(job: vtrr.Job) -> None:
    """Completes at once; payload `sleep:<seconds>` sleeps first, `crash` kills the process."""
    body = job.payload.decode()
    if body == "crash" and job.timeouts == 0:
        os._exit(17)  # a worker dying mid-task: no ACK, no NACK
    if body.startswith("sleep:"):
        time.sleep(float(body.split(":", 1)[1]))
    _client.rpush(f"done:{job.queue_name}", f"{job.id}:{job.timeouts}:{job.nacks}")


def record_pid(job: vtrr.Job) -> None:
    """Runs a little while, then notes `<id>:<pid>` (which process ran it) in `done:<queue>`."""
    time.sleep(0.01)
    _client.rpush(f"done:{job.queue_name}", f"{job.id}:{os.getpid()}")
