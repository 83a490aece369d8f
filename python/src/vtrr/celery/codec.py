"""The payload codec: vtrr-queue's item JSON, `.queue()`'s task entries, and the
retry envelope that carries a run's lease to its retry."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from typing import Any, Final, TypedDict

from ..errors import SerializationError
from ..types import Lease

RETRY_KEY: Final = "vtrr_lease"
"""Where a retry message's payload carries the lease it keeps."""


class TaskSpec(TypedDict, total=False):
    """One entry of `.queue(tasks=[...])`: every key is optional."""

    weight: int
    args: list[Any] | tuple[Any, ...]
    kwargs: Mapping[str, Any]
    id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Payload:
    """An item's payload: vtrr-queue's JSON `{"task_name", "args", "kwargs"}`."""

    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]

    def encode(self) -> str:
        """The JSON vtrr-queue writes (same keys, order and separators)."""
        return json.dumps({"task_name": self.task_name, "args": self.args, "kwargs": self.kwargs})

    @classmethod
    def decode(cls, raw: bytes | str | Mapping[str, Any]) -> Payload | None:
        """The payload, or None when it is not vtrr-queue's shape."""
        try:
            data = raw if isinstance(raw, Mapping) else json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, Mapping):
            return None
        name, args, kwargs = data.get("task_name"), data.get("args", []), data.get("kwargs", {})
        if not isinstance(name, str) or not isinstance(args, list):
            return None
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            return None
        return cls(name, args, kwargs)


def encode_payload(task_name: str, args: object = (), kwargs: object = None) -> str:
    """An item's payload as vtrr-queue writes it; SerializationError if it cannot be.

    `args` must be a list or tuple, `kwargs` a mapping with str keys, and
    both JSON-serialisable (as vtrr-queue's `json.dumps`: tuples become lists).
    """
    if not isinstance(args, list | tuple):
        raise SerializationError(f"args must be a list or a tuple, not {type(args).__name__}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise SerializationError(f"kwargs must be a mapping, not {type(kwargs).__name__}")
    bad_keys = [key for key in kwargs if not isinstance(key, str)]
    if bad_keys:
        raise SerializationError(f"kwargs keys must be str, not {bad_keys[0]!r}")
    payload = Payload(task_name, list(args), dict(kwargs))
    try:
        return payload.encode()
    except (TypeError, ValueError, RecursionError) as error:
        raise SerializationError(f"task arguments are not JSON-serialisable: {error}") from error


@dataclasses.dataclass(slots=True)
class Delivery:
    """One run of the task: the item's payload and the lease it runs under."""

    payload: Payload
    lease: Lease | None
    """None only for a vtrr-queue 0.1.0 retry message (its item has no lease)."""
    lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    retrying: bool = False
    """Set by `self.retry()` once the retry is being sent: the run keeps the lease."""

    def retry_payload(self) -> dict[str, Any]:
        """What the retry message carries: the payload and the lease it keeps."""
        body: dict[str, Any] = {
            "task_name": self.payload.task_name,
            "args": self.payload.args,
            "kwargs": self.payload.kwargs,
        }
        if self.lease is not None:
            body[RETRY_KEY] = {
                "id": self.lease.id,
                "token": self.lease.token,
                "timeouts": self.lease.timeouts,
                "nacks": self.lease.nacks,
                "partition": self.lease.partition,
            }
        return body

    @classmethod
    def from_retry(cls, body: Mapping[str, Any]) -> Delivery | None:
        payload = Payload.decode(body)
        if payload is None:
            return None
        kept = body.get(RETRY_KEY)
        if kept is None:
            return cls(payload, None)
        if not isinstance(kept, Mapping):
            return None
        partition = kept.get("partition")
        try:
            lease = Lease(
                id=str(kept["id"]),
                payload=payload.encode().encode(),
                token=str(kept["token"]),
                timeouts=int(kept.get("timeouts", 0)),
                nacks=int(kept.get("nacks", 0)),
                partition=None if partition is None else str(partition),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return cls(payload, lease)
