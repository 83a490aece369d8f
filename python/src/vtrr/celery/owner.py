"""The `VTRRQueue` as the trigger task and the `@queue.task` wrapper use it:
a Protocol, so they need not import the queue module, which imports them."""

from __future__ import annotations

from typing import Protocol

from ..client import Queue
from ..heartbeat import Heartbeat
from .broker import Triggers
from .codec import Delivery


class Named(Protocol):
    @property
    def name(self) -> str: ...


class Owner(Protocol):
    """What a trigger run needs of the queue that registered its task."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> Queue: ...

    @property
    def celery_queue(self) -> str: ...

    @property
    def lease_ms(self) -> int: ...

    @property
    def triggers(self) -> Triggers: ...

    @property
    def _heartbeat(self) -> Heartbeat: ...

    @property
    def _task(self) -> Named | None: ...

    def _leasable(self) -> int: ...

    def _lease_next(self, expected: str | None) -> Delivery | None: ...
