"""vtrr: a fair queue with leases, native in Redis — the Python client.

`Queue`/`AsyncQueue` send the module's commands; `Worker` runs handlers
with renewals, fenced ACK/NACK and graceful shutdown; `ShardedQueue`
spreads one tenant population over sub-queues on a Redis Cluster;
`vtrr.celery` and `vtrr.django` plug the queue into those frameworks.
"""

from .client import AsyncQueue, Queue
from .commands import Limit
from .errors import (
    InvalidArgument,
    ModuleNotLoaded,
    NoPermission,
    PartitionFull,
    SerializationError,
    SlotMoving,
    VTRRError,
    WrongType,
)
from .heartbeat import Heartbeat
from .sharded import ShardedLease, ShardedQueue, ShardedStats, shard_of
from .types import (
    AckedLeases,
    DeadItem,
    Fenced,
    Item,
    JobState,
    JobStatus,
    Lease,
    Missed,
    NackOutcome,
    PartitionSettings,
    PartitionView,
    Policy,
    Rank,
    Rate,
    ScheduleView,
    Stats,
    Totals,
)
from .worker import Backoff, DeadLetter, Hooks, Job, Retry, Worker, failure_reason

__all__ = [
    "AckedLeases",
    "AsyncQueue",
    "Backoff",
    "DeadItem",
    "DeadLetter",
    "Fenced",
    "Heartbeat",
    "Hooks",
    "InvalidArgument",
    "Item",
    "Job",
    "JobState",
    "JobStatus",
    "Lease",
    "Limit",
    "Missed",
    "ModuleNotLoaded",
    "NackOutcome",
    "NoPermission",
    "PartitionFull",
    "PartitionSettings",
    "PartitionView",
    "Policy",
    "Queue",
    "Rank",
    "Rate",
    "Retry",
    "ScheduleView",
    "SerializationError",
    "ShardedLease",
    "ShardedQueue",
    "ShardedStats",
    "SlotMoving",
    "Stats",
    "Totals",
    "VTRRError",
    "Worker",
    "WrongType",
    "failure_reason",
    "shard_of",
]
