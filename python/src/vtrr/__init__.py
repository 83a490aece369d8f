"""vtrr: a fair queue with leases, native in Redis — the Python client.

`Queue`/`AsyncQueue` send the module's commands; `Worker` runs handlers
with renewals, fenced ACK/NACK and graceful shutdown; `ShardedQueue`
spreads one tenant population over sub-queues on a Redis Cluster;
`vtrr.celery` and `vtrr.django` plug the queue into those frameworks.
"""

from .client import AsyncQueue, Fenced, Queue
from .errors import (
    InvalidArgument,
    ModuleNotLoaded,
    NoPermission,
    SerializationError,
    SlotMoving,
    VTRRError,
    WrongType,
)
from .types import DeadItem, Item, Lease, PartitionSettings, PartitionView, Policy, Stats

__all__ = [
    "AsyncQueue",
    "DeadItem",
    "Fenced",
    "InvalidArgument",
    "Item",
    "Lease",
    "ModuleNotLoaded",
    "NoPermission",
    "PartitionSettings",
    "PartitionView",
    "Policy",
    "Queue",
    "SerializationError",
    "SlotMoving",
    "Stats",
    "VTRRError",
    "WrongType",
]
