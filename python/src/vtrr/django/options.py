"""What the backend's options mean: queue names, partitions and weights, durations and
the callables given by dotted path."""

from __future__ import annotations

import datetime
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.tasks.exceptions import InvalidTask
from django.utils.module_loading import import_string

DEFAULT_PARTITION = "default"
"""The partition of a task enqueued without a `partition_key` keyword argument."""

PARTITION_KWARG = "partition_key"

type PartitionFunc = Callable[[Any, Sequence[Any], Mapping[str, Any]], str]
type WeightFunc = Callable[[Any, Sequence[Any], Mapping[str, Any]], int]


def default_partition(task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The `partition_key` keyword argument (as text) when given, else `DEFAULT_PARTITION`.

    The argument stays in the task's kwargs: the function receives it, so the
    same call works on any other task backend.
    """
    value = kwargs.get(PARTITION_KWARG)
    return DEFAULT_PARTITION if value is None else str(value)


def default_weight(task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """Every task costs 1."""
    return 1


def vtrr_queue_name(prefix: str, queue_name: str) -> str:
    """The vtrr queue of a Django queue: its whole name is the hash tag."""
    return "{" + prefix + ":" + queue_name + "}"


def _takes_partition_key(func: Callable[..., Any]) -> bool:
    """Whether `func` accepts a `partition_key` keyword: a parameter of that name, or `**kwargs`.

    A signature that cannot be read counts as accepting it: only a call
    certain to fail is refused.
    """
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        parameter.kind is parameter.VAR_KEYWORD
        or (parameter.name == PARTITION_KWARG and parameter.kind is not parameter.POSITIONAL_ONLY)
        for parameter in parameters
    )


def check_partition_kwarg(task: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse a `partition_key` keyword argument the task's function would not take.

    The argument stays in the task's kwargs (`default_partition`), so the
    function is called with it: without the parameter, the task would be
    queued and only fail when it runs (TypeError, unexpected keyword).
    """
    if PARTITION_KWARG in kwargs and not _takes_partition_key(task.func):
        raise InvalidTask(
            f"task {task.module_path} is enqueued with a {PARTITION_KWARG!r} keyword argument, "
            f"which it is called with, but its function takes no {PARTITION_KWARG!r} parameter: "
            f"add `{PARTITION_KWARG}: str | None = None` (or **kwargs) to its parameters; "
            "nothing was enqueued"
        )


def duration(
    options: Mapping[str, Any], key: str, default: datetime.timedelta
) -> datetime.timedelta:
    value = options.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = datetime.timedelta(seconds=value)
    if not isinstance(value, datetime.timedelta) or value <= datetime.timedelta(0):
        raise ImproperlyConfigured(
            f"VTRRBackend option {key!r} must be a positive timedelta (or seconds), not {value!r}"
        )
    return value


def function[F](options: Mapping[str, Any], key: str, default: F) -> F:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as error:
            raise ImproperlyConfigured(
                f"VTRRBackend option {key!r}: cannot import {value!r}: {error}"
            ) from error
    if not callable(value):
        raise ImproperlyConfigured(
            f"VTRRBackend option {key!r} must be a callable or its dotted path, not {value!r}"
        )
    return cast(F, value)


def ms(value: datetime.timedelta) -> int:
    return max(1, math.ceil(value.total_seconds() * 1000))
