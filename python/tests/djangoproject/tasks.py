"""The test project's tasks: each records what it did in a Redis list, in completion order."""

from __future__ import annotations

import time
from typing import Any

import redis
from django.conf import settings
from django.tasks import TaskContext, task


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.TEST_REDIS_URL)


def _record(entry: str) -> None:
    _redis().rpush(settings.TEST_DONE_KEY, entry)


@task
def record(label: str, partition_key: str | None = None) -> str:
    """Note `label` as done (the partition comes from `partition_key`)."""
    _record(label)
    return label


@task
def note(label: str, **meta: Any) -> dict[str, Any]:
    """Note `label`; `partition_key` arrives in `meta`."""
    _record(f"note:{label}")
    return meta


@task
def add(a: int, b: int) -> int:
    _record(f"add:{a}+{b}")
    return a + b


@task
def fail(message: str) -> None:
    _record(f"fail:{message}")
    raise ValueError(message)


@task
def stamp(label: str) -> float:
    """Note `label` and return when it ran (Unix seconds)."""
    _record(label)
    return time.time()


@task
def gate(label: str, key: str) -> str:
    """Note `label:started`, then wait (at most 30 s) until something is pushed to `key`."""
    _record(f"{label}:started")
    _redis().blpop([key], timeout=30)
    _record(label)
    return label


@task
def sleep_then_record(label: str, seconds: float) -> str:
    time.sleep(seconds)
    _record(label)
    return label


@task(takes_context=True)
def hang_first_attempt(context: TaskContext, label: str) -> dict[str, Any]:
    """Note `label:<attempt>`; the first attempt then hangs (its worker gets killed)."""
    attempt = context.attempt
    _record(f"{label}:{attempt}")
    if attempt == 1:
        time.sleep(60)
    return {"attempt": attempt, "workers": context.task_result.worker_ids}


def tenant_of(task: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A `partition` option: the tenant from the first argument (an int is refused)."""
    return args[0] if kwargs.get("raw") else f"t{args[0] % 2}"


def cost_of(task: Any, args: list[Any], kwargs: dict[str, Any]) -> int:
    """A `weight` option: the second argument."""
    return int(args[1])
