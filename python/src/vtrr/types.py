"""What the commands reply, as typed values."""

from __future__ import annotations

import dataclasses
import enum
from typing import Literal, Protocol

Layout = Literal["keys", "native"]


def decode(value: bytes | str) -> str:
    """An id or partition as text; bytes that are not UTF-8 survive a round trip."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def encode(value: str | bytes) -> bytes:
    """The bytes a decoded id or partition came from."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """One item to enqueue: its partition (tenant), id, payload and weight (its cost)."""

    partition: str
    id: str
    payload: bytes | str
    weight: int = 1


class Fenced(Protocol):
    """A lease's identity: ACK, RENEW and NACK need its id and token."""

    @property
    def id(self) -> str: ...

    @property
    def token(self) -> str: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """A leased item: ACK, RENEW and NACK need its id and token."""

    id: str
    payload: bytes
    token: str
    timeouts: int
    """How many times this item's lease expired before (0 on first delivery)."""
    nacks: int
    """How many times a worker nacked it."""
    partition: str | None = None
    """Its partition (tenant), as enqueued; None in a Lease made by hand."""


class NackOutcome(enum.StrEnum):
    """Where a nacked item went (`VTRR.NACK ... WITHSTATE`).

    `DEAD` also when the queue's MAX-NACKS dead-lettered an item the worker
    asked to requeue or delay.
    """

    QUEUED = "queued"
    DELAYED = "delayed"
    DEAD = "dead"


@dataclasses.dataclass(frozen=True, slots=True)
class AckedLeases:
    """`VTRR.LEASE ... ACK`: which acks took (in the order given), then the leases."""

    acked: tuple[bool, ...]
    """Per lease given: True when it was current and its item is done."""
    leases: list[Lease]


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """VTRR.STATS: the queue's counts."""

    queued: int
    held: int
    inflight: int
    expired: int
    delayed: int
    dead: int
    partitions: int
    #: Partitions with items queued, held ones included (a paused partition,
    #: or one at its cap, that still has items counts): O(1) to read.
    queued_partitions: int
    paused_partitions: int
    capped_partitions: int
    current_virtual_time: int
    next_due_ms: int | None
    next_expiry_ms: int | None
    layout: Layout
    #: How long the longest-waiting partition's line has gone unserved (ms);
    #: None when nothing is queued.
    oldest_waiting_ms: int | None
    #: What the queue has done, counted as it goes (kept with the queue,
    #: replicated and persisted with it).
    totals: Totals
    #: The whole tokens in the queue's own bucket now (VTRR.POLICY ... RATE);
    #: None without a queue rate.
    tokens: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Totals:
    """Counters of what a queue or a partition was served, as it goes.

    A partition's count since its record last appeared (a partition with
    nothing counted or set has no record), the queue's since it was made.
    """

    enqueued: int
    leased: int
    acked: int
    nacked: int
    dead: int
    expired: int


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: `amount` weight units per `per_ms` ms, at most `burst` at
    once (`amount` when None), enforced at LEASE; a partition's (VTRR.LIMIT ...
    RATE), the queue's default (DEFAULT-RATE) or the queue's own (VTRR.POLICY ... RATE)."""

    amount: int
    per_ms: int
    burst: int | None = None


Missed = Literal["skip", "one", "all"]
MISSED: tuple[Missed, ...] = ("skip", "one", "all")

Rank = Literal["queued", "oldest", "leased", "dead"]
RANKS: tuple[Rank, ...] = ("queued", "oldest", "leased", "dead")


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionView:
    """VTRR.PARTITIONS: one partition's counts and settings."""

    partition: str
    queued: int
    held: int
    leased: int
    delayed: int
    dead: int
    paused: bool
    share: int
    concurrency: int | None
    concurrency_in_force: int | None
    virtual_time: int | None
    #: How long its line has gone unserved: since it had items queued or
    #: was last leased from, whichever is later (ms); None with none queued.
    waiting_ms: int | None
    totals: Totals
    rate: Rate | None = None
    #: Its own rate, else the queue's default rate (VTRR.POLICY DEFAULT-RATE).
    rate_in_force: Rate | None = None
    #: With a rate: the whole tokens its bucket holds (negative while it
    #: pays back an overdraft), and when its next is due while it has none.
    tokens: int | None = None
    next_token_ms: int | None = None
    #: Its own MAX-QUEUED (the most items it may have waiting: queued or
    #: delayed), and the one in force: its own, else the queue's
    #: DEFAULT-MAX-QUEUED; None without one.
    max_queued: int | None = None
    max_queued_in_force: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionSettings:
    """VTRR.LIMIT without options: a partition's own settings."""

    concurrency: int | None
    paused: bool
    share: int
    rate: Rate | None = None
    #: The most items it may have waiting (queued or delayed): an enqueue
    #: past it raises `PartitionFull`; None without its own.
    max_queued: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """VTRR.POLICY without options; None is NONE (never give up, no default
    cap, rate or MAX-QUEUED, no queue-wide cap or rate, no finished job kept)."""

    max_timeouts: int | None
    max_nacks: int | None
    default_concurrency: int | None
    default_rate: Rate | None = None
    #: The queue's own cap and rate, on top of every partition's: at most
    #: `concurrency` items leased at once across the queue, and one bucket
    #: every lease spends its item's weight from, both handed out in VTRR
    #: (fair) order.
    concurrency: int | None = None
    rate: Rate | None = None
    #: The MAX-QUEUED of every partition without its own.
    default_max_queued: int | None = None
    #: How long a finished job's outcome is kept, its result with it (ms):
    #: `result()` reads it, `job()` shows it `done` or `cancelled`.
    result_ttl_ms: int | None = None
    #: How long an ENQUEUE or DEFER of a finished job's id is skipped (ms).
    dedup_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DeadItem:
    """VTRR.DEAD: a dead-lettered item and why it died."""

    id: str
    payload: bytes
    partition: str | None
    weight: int | None
    timeouts: int
    nacks: int
    died_at_ms: int
    reason: str
    """Why it died: `max-timeouts`, `max-nacks`, `nack` (dead-lettered by its
    worker) or `payload missing`."""
    last_error: str | None
    """What failed, as its last NACK's REASON said (a worker's: the
    exception's summary, then its traceback); None when no nack said."""


JobState = Literal["queued", "held", "leased", "delayed", "dead", "done", "cancelled", "unknown"]


@dataclasses.dataclass(frozen=True, slots=True)
class JobStatus:
    """VTRR.JOB (and VTRR.RESULT): where an item is, and what the queue keeps of it there.

    `done` and `cancelled`: it finished (acked, cancelled) while the queue's
    policy keeps outcomes (`set_policy(result_ttl_ms=..., dedup_ms=...)`),
    which keeps only when and what came of it: its `finished_ms` and
    `result`. `unknown`: never enqueued, or finished and nothing of it is
    kept. Every field but `id` and `state` is None where the state has none
    (all of them for an unknown id).
    """

    id: str
    state: JobState
    """`queued` (a LEASE may take it), `held` (behind its partition's cap,
    pause or rate), `leased`, `delayed`, `dead`, `done`, `cancelled` or `unknown`."""
    partition: str | None
    weight: int | None
    priority: int | None
    timeouts: int | None
    nacks: int | None
    expires_ms: int | None
    """A leased item's lease expiry (Unix ms)."""
    due_ms: int | None
    """A delayed item's due time (Unix ms)."""
    dead_ms: int | None
    """When a dead item died (Unix ms)."""
    reason: str | None
    """Why a dead item died, as `DeadItem.reason`."""
    last_error: str | None
    """What its last NACK's REASON said failed."""
    finished_ms: int | None = None
    """When a done or cancelled job finished (Unix ms)."""
    result: bytes | None = None
    """What a done job returned (VTRR.ACKRESULT), while the queue's
    RESULT-TTL keeps it; None when it returned nothing or none is kept."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleView:
    """VTRR.SCHEDULES: one recurring schedule and its next runs.

    Each run is enqueued by the server in `partition` as the item
    `schedule:<name>:<due-ms>`. `every_ms` is None for a CRON schedule, `cron` and
    `tz` for an EVERY one. A definition another client wrote that does not
    read as one has only `name`, `next_ms` and `runs`: the rest is None.
    """

    name: str
    every_ms: int | None
    cron: str | None
    tz: str | None
    missed: Missed | None
    partition: str | None
    weight: int | None
    payload: bytes | None
    #: The run it waits for (Unix ms); None when it has none ahead.
    next_ms: int | None
    #: The next due times asked for (`runs=`), from `next_ms` on.
    runs: list[int]
