"""`ShardedQueue`: one tenant population over K sub-queues (docs/scaling.md).

One vtrr queue lives in one hash slot, so on one shard. `ShardedQueue(client,
"files", shards=K)` spreads a queue over the K sub-queues `{files:0}` …
`{files:K-1}` (their own hash tags, so a cluster can place them on different
shards) and puts every partition in exactly one of them:

    sub-queue(p) = fmix64(FNV-1a-64(p)) mod K

— the function of docs/scaling.md and of the simulation in
`src/core/tests/sharding.rs`. Producers and anyone setting tenant controls
must use this same function and the same K; K must not change while items
are queued (changing it moves partitions: drain first).

Producer side: `enqueue`, `enqueue_many`, `defer` go to each item's
sub-queue; per-tenant controls (`set_limit`, `pause`, `resume`, `limit`,
`partition`) to the partition's; queue-wide ones (`set_policy`) to every
sub-queue, so the queue's own cap and rate hold per sub-queue. `stats`,
`dead`, `check`, `partitions` and `partitions_top` read every sub-queue.

Worker side: `lease` runs the **weighted rotation** of docs/scaling.md: a
charge per sub-queue, weight/n_i added to sub-queue i's charge for each item
leased there (n_i its partitions with items queued, VTRR.STATS'
`queued-partitions`, O(1), re-read every `read_every` leases), the next
lease from the non-empty sub-queue with the lowest charge; a sub-queue back
from empty rejoins at the lowest charge of the busy ones. n_i counts paused
partitions and those at their cap too: a sub-queue whose LEASE finds nothing
is treated as empty until the next read, so one with only such partitions
costs one LEASE per read. The LEASE reply does not carry an item's
weight, so every payload is wrapped in a small envelope holding it
(`wrap`/`unwrap`); the returned `ShardedLease` carries the caller's own
payload and remembers its sub-queue, so `ack`, `renew` and `nack` go back
to the right one.

**A sub-queue that cannot be reached** (its node down, its slot not
served, a slot move the rotation would wait for) is skipped for a back-off
(`down_seconds`, doubling up to `down_max_seconds`) and tried again after
it: the others keep serving. The rotation sends its calls without waiting
out slot moves (`retry_seconds` 0: waiting on one sub-queue would stop
leasing from all of them); `ack`, `renew`, `nack` and the control methods
still wait and still raise, as a `Queue`'s do.

**Calls that cannot block.** On a `RedisCluster`, the rotation and the
settling of a worker's round trip (`exchange`) go through connections of
their own, with the cluster client's retries off and explicit timeouts
(`probe_timeout_seconds` to connect, and to read beyond a blocking wait),
whatever the redis-py version's defaults: redis-py 8.2's defaults retry a
call to a killed master for about four seconds, during which no sub-queue
would serve. A dead node costs a round at most one such call. On a
`redis.Redis` every sub-queue lives on the one server, so there is no live
shard to keep serving: the calls use the client as given.

**Threads.** A `ShardedQueue`'s rotation (charges, counts) is one worker's
state, behind a lock: the threads of one `vtrr.Worker` share it (leases
are chosen one at a time; a blocking wait holds no lock), and count as one
worker in the fairness bound. Separate instances (processes) are separate
workers: the bound grows with their number (M in docs/scaling.md). The
producer and control methods keep no state of their own and are as
thread-safe as the client.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, cast

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import commands
from .client import Queue
from .commands import Limit
from .errors import SlotMoving, VTRRError
from .exchange import Exchange, Exchanged, GiveBack
from .limits import MAX_WEIGHT, check_int, check_item
from .types import (
    DeadItem,
    Item,
    JobStatus,
    Layout,
    Lease,
    NackOutcome,
    PartitionSettings,
    PartitionView,
    Policy,
    Rank,
    Rate,
    Stats,
    Totals,
    encode,
)

_M64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

_MAGIC = b"\x1fvtrr:"
_SEP = b"\x1f"

logger = logging.getLogger("vtrr.sharded")

# What a sub-queue that cannot be reached raises: its node refuses or times
# out, the cluster does not serve its slot (CLUSTERDOWN, no owner), or its
# slot is moving. Not the module's own errors (WRONGTYPE, NOPERM, ...):
# those are mistakes a back-off would hide.
_UNREACHABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError,
    redis.exceptions.SlotNotCoveredError,
    SlotMoving,
)


def _bounded(client: redis.RedisCluster, timeout: float, read_timeout: float) -> redis.RedisCluster:
    """A cluster client for calls that must stay short: no retries, explicit timeouts.

    The user's client's own connection settings (credentials, TLS, protocol,
    ...) are kept; its nodes are the ones the user's client knows now.
    """
    own = client.nodes_manager.connection_kwargs
    settings = {
        key: value
        for key, value in own.items()
        if key in redis.cluster.REDIS_ALLOWED_KEYS
        and key not in ("host", "port", "retry", "redis_connect_func", "connection_pool")
    }
    settings.update(socket_connect_timeout=timeout, socket_timeout=read_timeout)
    known: list[Any] = cast(Any, client).get_nodes()
    nodes = [cast(Any, redis.cluster).ClusterNode(node.host, node.port) for node in known]
    return redis.RedisCluster(startup_nodes=nodes, retry=Retry(NoBackoff(), 0), **settings)


def shard_of(partition: str | bytes, shards: int) -> int:
    """A partition's sub-queue: fmix64(FNV-1a-64(its bytes)) mod `shards`."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    h = _FNV_OFFSET
    for byte in encode(partition):
        h = ((h ^ byte) * _FNV_PRIME) & _M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    h ^= h >> 33
    return h % shards


def wrap(payload: bytes | str, weight: int) -> bytes:
    """The payload as a sharded queue stores it: `\\x1fvtrr:<weight>\\x1f` + payload."""
    body = payload.encode() if isinstance(payload, str) else payload
    return _MAGIC + str(weight).encode() + _SEP + body


def unwrap(stored: bytes) -> tuple[int, bytes, bool]:
    """(weight, payload, enveloped) of a stored payload.

    A payload without the envelope (enqueued by something other than a
    `ShardedQueue`) comes back whole, counted as weight 1, with
    `enveloped` False.
    """
    if stored.startswith(_MAGIC):
        end = stored.find(_SEP, len(_MAGIC))
        digits = stored[len(_MAGIC) : end]
        if end > 0 and digits.isdigit() and 1 <= int(digits) <= MAX_WEIGHT:
            return int(digits), stored[end + 1 :], True
    return 1, stored, False


@dataclasses.dataclass(frozen=True, slots=True)
class ShardedLease:
    """A leased item of a `ShardedQueue`: ACK, RENEW and NACK need its id, token and shard."""

    id: str
    payload: bytes
    """The producer's payload, the envelope removed."""
    token: str
    timeouts: int
    """How many times this item's lease expired before (0 on first delivery)."""
    nacks: int
    """How many times a worker nacked it."""
    shard: int
    """The index of the sub-queue it was leased from."""
    weight: int
    """Its weight, as the producer wrote it in the envelope (1 without one)."""
    partition: str | None = None
    """Its partition (tenant), as enqueued; None in a lease made by hand."""


@dataclasses.dataclass(frozen=True, slots=True)
class ShardedStats:
    """VTRR.STATS over every sub-queue.

    The counts are sums over the sub-queues (`partitions` sums each one's
    partition records, those with items or settings: a partition is in one sub-queue only,
    so nothing is counted twice), and so are the `totals`; `next_due_ms` and
    `next_expiry_ms` are the earliest of any sub-queue, `oldest_waiting_ms`
    the longest; `tokens` sums the buckets of the sub-queues with a queue
    rate (each has its own: see `ShardedQueue.set_policy`), None when none
    has one. Virtual times do not add up across sub-queues: each
    sub-queue's own `Stats` is in `shards`.
    """

    queued: int
    held: int
    inflight: int
    expired: int
    delayed: int
    dead: int
    partitions: int
    queued_partitions: int
    paused_partitions: int
    capped_partitions: int
    next_due_ms: int | None
    next_expiry_ms: int | None
    oldest_waiting_ms: int | None
    tokens: int | None
    totals: Totals
    shards: tuple[Stats, ...]


def _earliest(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _longest(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _total(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _sum_totals(each: Sequence[Totals]) -> Totals:
    return Totals(
        *(sum(getattr(t, field.name) for t in each) for field in dataclasses.fields(Totals))
    )


_MAX_TOP = 10_000  # VTRR.PARTITIONS ... TOP's largest count

# Each ranking of `partitions_top` as the server orders it: the most (or
# the longest waiting) first, ties by name.
_RANKED_BY: dict[Rank, Callable[[PartitionView], tuple[int, bytes]]] = {
    "queued": lambda view: (-view.queued, encode(view.partition)),
    "oldest": lambda view: (-(view.waiting_ms or 0), encode(view.partition)),
    "leased": lambda view: (-view.leased, encode(view.partition)),
    "dead": lambda view: (-view.dead, encode(view.partition)),
}


class ShardedQueue:
    """One queue's tenants over `shards` sub-queues `{name:0}` … `{name:K-1}`.

    `client` is a `redis.RedisCluster` (each sub-queue routed by its tag) or
    a `redis.Redis` (all sub-queues on one server). `name` must not contain
    braces: the sub-queues' names are hash tags of their own. `read_every`:
    how many of this worker's leases between two reads of the sub-queues'
    partitions with items queued (VTRR.STATS, O(1) each).
    `block_slice_ms`: how long one blocking LEASE waits on one sub-queue
    before the worker looks at all of them again. `down_seconds`,
    `down_max_seconds`: how long the rotation skips a sub-queue it could not
    reach, doubled at each failed retry up to the maximum.
    `probe_timeout_seconds`: on a `RedisCluster`, how long one call of the
    rotation or of a round trip's settling may take to find a node
    unreachable (its connect timeout, and its read timeout beyond the
    blocking wait); `close()` closes those connections.
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        name: str,
        shards: int,
        *,
        read_every: int = 16,
        block_slice_ms: int = 100,
        retry_seconds: float = 30.0,
        down_seconds: float = 1.0,
        down_max_seconds: float = 30.0,
        probe_timeout_seconds: float = 1.0,
    ) -> None:
        if not name:
            raise ValueError("queue name must not be empty")
        if "{" in name or "}" in name:
            raise ValueError(
                f"sharded queue name {name!r} must not contain braces: "
                "its sub-queues are named {name:0} ... {name:K-1}, each its own hash tag"
            )
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError("shards must be a positive integer")
        if read_every < 1:
            raise ValueError("read_every must be at least 1")
        if block_slice_ms < 1:
            raise ValueError("block_slice_ms must be at least 1")
        if not 0 < down_seconds <= down_max_seconds:
            raise ValueError("down_seconds must be positive and at most down_max_seconds")
        if not probe_timeout_seconds > 0:
            raise ValueError("probe_timeout_seconds must be positive")
        self.client = client
        self.name = name
        self.shards = shards
        self.read_every = read_every
        self.block_slice_ms = block_slice_ms
        self.down_seconds = down_seconds
        self.down_max_seconds = down_max_seconds
        self.sub_queues: tuple[Queue, ...] = tuple(
            Queue(client, f"{{{name}:{i}}}", retry_seconds=retry_seconds) for i in range(shards)
        )
        # The same sub-queues over the bounded client: `_probes` for the
        # rotation, which skips one whose slot moves instead of waiting for it;
        # `_settling` for a round trip's ACK, RENEW and NACK, which wait a slot
        # move out (an ACK given up would run the job twice) but not a dead node.
        self._bounded_client: redis.RedisCluster | None = None
        if isinstance(client, redis.RedisCluster):
            self._bounded_client = _bounded(
                client, probe_timeout_seconds, probe_timeout_seconds + block_slice_ms / 1000
            )
        quick = self._bounded_client or client
        self._probes: tuple[Queue, ...] = tuple(
            Queue(quick, queue.name, retry_seconds=0) for queue in self.sub_queues
        )
        self._settling: tuple[Queue, ...] = tuple(
            Queue(quick, queue.name, retry_seconds=retry_seconds) for queue in self.sub_queues
        )
        # The weighted rotation: this worker's state (re-entrant: a sweep records its lease).
        self._rotation = threading.RLock()
        self._charge = [0.0] * shards
        self._backlogged = [0] * shards
        self._since_read = read_every  # read before the first lease
        self._turn = 0  # the sub-queue the next blocking wait goes to
        # Sub-queues that could not be reached: skipped until `_down_until`
        # (monotonic seconds); `_down_for` is the back-off in force, 0 when up.
        self._down_until = [0.0] * shards
        self._down_for = [0.0] * shards
        self._last_error: Exception | None = None

    def __repr__(self) -> str:
        return f"ShardedQueue({self.name!r}, shards={self.shards})"

    def close(self) -> None:
        """Close the rotation's own connections (the client given stays the caller's)."""
        if self._bounded_client is not None:
            self._bounded_client.close()

    # Routing.
    def shard_of(self, partition: str) -> int:
        """The index of the partition's sub-queue."""
        return shard_of(partition, self.shards)

    def queue_for(self, partition: str) -> Queue:
        """The partition's sub-queue."""
        return self.sub_queues[self.shard_of(partition)]

    def _split(self, items: Iterable[Item]) -> dict[int, list[Item]]:
        """Each sub-queue's items, wrapped, every item checked before any is sent."""
        groups: dict[int, list[Item]] = {}
        for item in items:
            check_item(item)
            wrapped = dataclasses.replace(item, payload=wrap(item.payload, item.weight))
            groups.setdefault(self.shard_of(item.partition), []).append(wrapped)
        # No item at all: the first sub-queue's command refuses it, as a Queue's does.
        return groups or {0: []}

    # Adding items.
    def enqueue(
        self,
        partition: str,
        item_id: str,
        payload: bytes | str,
        weight: int = 1,
        *,
        priority: int = 0,
    ) -> bool:
        """Add one item to its partition's sub-queue; False when its id is already there."""
        return (
            self.enqueue_many([Item(partition, item_id, payload, weight)], priority=priority) == 1
        )

    def enqueue_many(self, items: Iterable[Item], *, priority: int = 0) -> int:
        """Add items, one atomic VTRR.ENQUEUE per sub-queue; returns how many were new.

        Atomic per sub-queue only: the items of each sub-queue go in one call,
        in turn. Every item is checked first (a bad one refuses the whole
        batch before anything is sent), but an error of the server or the
        connection on one sub-queue's call leaves the calls before it done:
        a `PartitionFull` refuses its sub-queue's items whole, not the others'.
        """
        groups = self._split(items)
        return sum(
            self.sub_queues[i].enqueue_many(group, priority=priority) for i, group in groups.items()
        )

    def defer(self, delay_ms: int, items: Iterable[Item], *, priority: int = 0) -> int:
        """Add items leasable `delay_ms` from now, one call per sub-queue (as `enqueue_many`).

        A sub-queue serves its levels strictly; the rotation between
        sub-queues knows no levels, so a priority is strict within each.
        """
        groups = self._split(items)
        return sum(
            self.sub_queues[i].defer(delay_ms, group, priority=priority)
            for i, group in groups.items()
        )

    # Sub-queues that cannot be reached.
    def _is_down(self, shard: int) -> bool:
        """Whether the rotation skips `shard` now (its back-off has not run out)."""
        return time.monotonic() < self._down_until[shard]

    def _failed(self, shard: int, error: Exception) -> None:
        """`shard` could not be reached: skip it for a back-off, doubled at each failed retry."""
        with self._rotation:
            first = self._down_for[shard] == 0.0
            self._down_for[shard] = (
                self.down_seconds
                if first
                else min(self.down_max_seconds, 2 * self._down_for[shard])
            )
            self._down_until[shard] = time.monotonic() + self._down_for[shard]
            self._backlogged[shard] = 0
            self._last_error = error
        if first:  # one line when it goes, one when it comes back
            logger.warning(
                "%s: cannot be reached (%s); skipped, tried again in %.1f s",
                self.sub_queues[shard].name,
                error,
                self._down_for[shard],
            )

    def _reached(self, shard: int) -> None:
        if self._down_for[shard]:
            with self._rotation:
                self._down_for[shard] = self._down_until[shard] = 0.0
            logger.warning("%s: reachable again", self.sub_queues[shard].name)

    def _every_one_down(self) -> redis.exceptions.ConnectionError:
        """What `lease` raises when no sub-queue can be reached: the caller's own back-off then."""
        error = redis.exceptions.ConnectionError(
            f"{self.name}: no sub-queue can be reached (the last error: {self._last_error})"
        )
        error.__cause__ = self._last_error
        return error

    # Leases: the weighted rotation.
    def _backlog_of(self, shard: int) -> int:
        """n_i: the partitions with items queued (STATS `queued-partitions`, O(1)); 0 if it is down.

        Paused partitions and those at their cap count while they hold items:
        a sub-queue with only those leases nothing, and `_sweep` then treats
        it as empty until the next read.
        """
        if self._is_down(shard):
            return 0
        try:
            count = self._probes[shard].stats().queued_partitions
        except _UNREACHABLE as error:
            self._failed(shard, error)
            return 0
        self._reached(shard)
        return count

    def _read_counts(self) -> None:
        """n_i for every sub-queue (0 for one that cannot be reached: it is skipped)."""
        counts = [self._backlog_of(i) for i in range(self.shards)]
        # A sub-queue back from empty rejoins at the lowest charge of the busy
        # ones: no credit for the time it had nothing.
        busy = [self._charge[i] for i in range(self.shards) if self._backlogged[i] and counts[i]]
        if busy:
            floor = min(busy)
            for i in range(self.shards):
                if counts[i] and not self._backlogged[i]:
                    self._charge[i] = max(self._charge[i], floor)
        else:
            # Nothing stayed busy: every sub-queue starts level, none carrying
            # credit or debt from before the idle time.
            self._charge = [0.0] * self.shards
        self._backlogged = counts
        self._since_read = 0

    def _leased(self, shard: int, reply: Lease) -> ShardedLease:
        weight, payload, _ = unwrap(reply.payload)
        self._charge[shard] += weight / max(self._backlogged[shard], 1)
        self._since_read += 1
        return ShardedLease(
            reply.id,
            payload,
            reply.token,
            reply.timeouts,
            reply.nacks,
            shard,
            weight,
            reply.partition,
        )

    def _sweep(self, lease_ms: int) -> ShardedLease | None:
        """One non-blocking lease from the lowest-charged non-empty sub-queue."""
        fresh = self._since_read >= self.read_every
        if fresh:
            self._read_counts()
        for attempt in range(1 if fresh else 2):
            order = sorted(
                (i for i in range(self.shards) if self._backlogged[i]),
                key=lambda i: self._charge[i],
            )
            for i in order:
                try:
                    reply = self._probes[i].lease(lease_ms)
                except _UNREACHABLE as error:
                    self._failed(i, error)  # the others keep serving
                    continue
                self._reached(i)
                if reply is not None:
                    return self._leased(i, reply)
                # Nothing leasable (empty, or its queued partitions all paused,
                # at their cap or throttled): skipped until the next read.
                self._backlogged[i] = 0
            if attempt == 0 and not fresh:
                self._read_counts()  # the counts were old: read them again, try once more
        return None

    def lease(self, lease_ms: int, *, block_ms: int | None = None) -> ShardedLease | None:
        """Lease the next item across the sub-queues (weighted rotation); None when none came.

        `block_ms` None: do not wait. Otherwise wait up to `block_ms` (0:
        forever) when every sub-queue looks empty: a blocking LEASE of at
        most `block_slice_ms` on one sub-queue at a time, in turn, then a
        fresh look at all of them. An item enqueued meanwhile into another
        sub-queue is seen within about K slices.

        A sub-queue that cannot be reached is skipped (see the module's
        docstring); when none can be, this raises `redis.ConnectionError`,
        so a `Worker` backs off and logs it as it does for a `Queue`.
        """
        deadline = None if not block_ms else time.monotonic() + block_ms / 1000
        while True:
            with self._rotation:
                leased = self._sweep(lease_ms)
                if leased is not None:
                    return leased
                up = [
                    (self._turn + step) % self.shards
                    for step in range(self.shards)
                    if not self._is_down((self._turn + step) % self.shards)
                ]
                if not up:
                    raise self._every_one_down()
                if block_ms is None:
                    return None
                i = up[0]
                self._turn = (i + 1) % self.shards
            wait_ms = self.block_slice_ms
            if deadline is not None:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return None
                wait_ms = min(wait_ms, left_ms)
            # The wait itself holds no lock: other threads lease meanwhile.
            try:
                reply = self._probes[i].lease(lease_ms, block_ms=wait_ms)
            except _UNREACHABLE as error:
                self._failed(i, error)
                continue
            self._reached(i)
            with self._rotation:
                self._since_read = self.read_every  # read the counts again next time
                if reply is not None:
                    return self._leased(i, reply)

    def lease_many(
        self, lease_ms: int, count: int, *, block_ms: int | None = None
    ) -> list[ShardedLease]:
        """Up to `count` leases by the rotation, one at a time; `block_ms` as in `lease`.

        It waits (up to `block_ms`) only when the first lease finds nothing.
        """
        check_int("count", count, 1, (1 << 63) - 1)  # as the server's COUNT
        return self._lease_up_to(lease_ms, count, block_ms)

    def _lease_up_to(self, lease_ms: int, count: int, block_ms: int | None) -> list[ShardedLease]:
        leases: dict[tuple[str, str], ShardedLease] = {}
        try:
            while len(leases) < count:
                got = self.lease(lease_ms)
                if got is None:
                    break
                leases[(got.id, got.token)] = got
        except _UNREACHABLE:
            if not leases:
                raise
            return list(leases.values())  # leased already: the caller's, not left to expire
        if not leases and count and block_ms is not None:
            got = self.lease(lease_ms, block_ms=block_ms)
            if got is not None:
                leases[(got.id, got.token)] = got
        return list(leases.values())

    def ack(
        self,
        *leases: ShardedLease,
        costs: Sequence[int] | None = None,
        results: Sequence[bytes | str] | None = None,
    ) -> int:
        """Fenced ACK (charging `costs` or keeping `results`, one per lease, as
        `Queue.ack`), one call per sub-queue concerned: how many were still current."""
        groups: dict[int, list[tuple[ShardedLease, int | None, bytes | str | None]]] = {}
        for lease, cost, result in commands.leases_with(leases, costs, results):
            groups.setdefault(lease.shard, []).append((lease, cost, result))
        return sum(
            self.sub_queues[i].ack(
                *(lease for lease, _, _ in group),
                costs=None if costs is None else [cost for _, cost, _ in group if cost is not None],
                results=None if results is None else [r for _, _, r in group if r is not None],
            )
            for i, group in groups.items()
        )

    def renew(self, lease: ShardedLease, lease_ms: int, *, cost: int | None = None) -> bool:
        """Fenced re-lease for `lease_ms` from now (reporting `cost` as
        `Queue.renew`), in the lease's sub-queue."""
        return self.sub_queues[lease.shard].renew(lease, lease_ms, cost=cost)

    def nack(
        self,
        lease: ShardedLease,
        *,
        delay_ms: int | None = None,
        dead: bool = False,
        reason: str | bytes | None = None,
    ) -> NackOutcome | None:
        """Give a leased item back to its sub-queue: at once, after `delay_ms`, or dead
        (`reason`: what failed, as `Queue.nack`)."""
        return self.sub_queues[lease.shard].nack(lease, delay_ms=delay_ms, dead=dead, reason=reason)

    def release(self, lease: ShardedLease) -> bool:
        """Give a leased item back unrun to its sub-queue, no nack counted."""
        return self.sub_queues[lease.shard].release(lease)

    def exchange(self, sent: Exchange) -> Exchanged:
        """A worker's round trip (`vtrr.exchange`) over the sub-queues.

        Each lease is settled and renewed in its own sub-queue, then the
        rotation leases up to `sent.count` items: a call per lease and per
        sub-queue visited, not one round trip (the sub-queues live on
        different nodes).

        A lease whose sub-queue cannot be reached is skipped for its
        sub-queue's back-off: its ACK is answered as lost (False) and its
        NACK as None (the item comes back by its lease's expiry if the node
        kept it), and its RENEW as None, not asked: a brief outage does not
        stop a job whose lease still stands, and the worker's next renewal
        (a third of the lease later) asks again. Raising instead would make
        the worker send the whole round trip again, and so lease from no
        sub-queue until that one came back. Once something was settled, a
        failed leasing returns no leases rather than raise, so the settled
        leases are not settled twice.
        """

        def own(lease: object) -> ShardedLease:
            if not isinstance(lease, ShardedLease):
                raise TypeError(f"a ShardedQueue settles ShardedLeases, not {lease!r}")
            return lease

        def settle[T](lease: object, call: Callable[[ShardedLease], T], lost: T) -> T:
            sharded = own(lease)
            if self._is_down(sharded.shard):
                return lost
            try:
                result = call(sharded)
            except _UNREACHABLE as error:
                self._failed(sharded.shard, error)
                return lost
            self._reached(sharded.shard)
            return result

        def give_back(give: GiveBack) -> Callable[[ShardedLease], NackOutcome | None]:
            if give.release:
                return lambda lease: (
                    NackOutcome.QUEUED if self._settling[lease.shard].release(lease) else None
                )
            return lambda lease: self._settling[lease.shard].nack(
                lease, delay_ms=give.delay_ms, dead=give.dead, reason=give.reason
            )

        nacked = tuple(settle(give.lease, give_back(give), None) for give in sent.nacks)

        def extend(cost: int | None) -> Callable[[ShardedLease], bool]:
            return lambda lease: self._settling[lease.shard].renew(lease, sent.lease_ms, cost=cost)

        renewed: tuple[bool | None, ...] = tuple(
            settle(lease, extend(cost), None)
            for lease, cost in zip(sent.renews, sent.renew_costs_each(), strict=True)
        )

        def finish(i: int) -> Callable[[ShardedLease], bool]:
            costs, results = sent.ack_options([i])
            return lambda lease: (
                self._settling[lease.shard].ack(lease, costs=costs, results=results) == 1
            )

        acked = tuple(settle(lease, finish(i), False) for i, lease in enumerate(sent.acks))
        try:
            leases = self._lease_up_to(sent.lease_ms, sent.count, sent.block_ms)
        except _UNREACHABLE:
            if not (sent.acks or sent.nacks or sent.renews):
                raise
            leases = []
        return Exchanged(acked, nacked, renewed, leases)  # type: ignore[arg-type]

    def reclaim(self, limit: int | None = None) -> int:
        """Take expired leases back now in every sub-queue (`limit` per sub-queue)."""
        return sum(queue.reclaim(limit) for queue in self.sub_queues)

    # Reading.
    def exists(self) -> bool:
        """Whether any sub-queue has a key on the server."""
        return any(queue.exists() for queue in self.sub_queues)

    def stats(self) -> ShardedStats:
        """Every sub-queue's VTRR.STATS, added up (see `ShardedStats`)."""
        each = tuple(queue.stats() for queue in self.sub_queues)
        return ShardedStats(
            queued=sum(s.queued for s in each),
            held=sum(s.held for s in each),
            inflight=sum(s.inflight for s in each),
            expired=sum(s.expired for s in each),
            delayed=sum(s.delayed for s in each),
            dead=sum(s.dead for s in each),
            partitions=sum(s.partitions for s in each),
            queued_partitions=sum(s.queued_partitions for s in each),
            paused_partitions=sum(s.paused_partitions for s in each),
            capped_partitions=sum(s.capped_partitions for s in each),
            next_due_ms=_earliest(s.next_due_ms for s in each),
            next_expiry_ms=_earliest(s.next_expiry_ms for s in each),
            oldest_waiting_ms=_longest(s.oldest_waiting_ms for s in each),
            tokens=_total(s.tokens for s in each),
            totals=_sum_totals([s.totals for s in each]),
            shards=each,
        )

    def check(self) -> list[str]:
        """Every sub-queue's VTRR.CHECK problems, each prefixed with its sub-queue's name."""
        return [f"{q.name}: {problem}" for q in self.sub_queues for problem in q.check()]

    def partition(self, partition: str) -> PartitionView:
        """One partition's counts and settings, from its sub-queue."""
        return self.queue_for(partition).partition(partition)

    def partitions_page(
        self, cursor: int = 0, count: int | None = None
    ) -> tuple[int, list[PartitionView]]:
        """One step of a scan over every sub-queue, sub-queue by sub-queue; go on until the cursor is 0.

        The cursor is `sub-queue cursor * K + sub-queue index`: a step
        scans one sub-queue, and a page may be empty where a sub-queue ends.
        """
        check_int("cursor", cursor, 0, (1 << 64) * self.shards - 1)  # HSCAN's are u64
        sub_cursor, shard = divmod(cursor, self.shards)
        after, views = self.sub_queues[shard].partitions_page(sub_cursor, count)
        if after:
            return after * self.shards + shard, views
        return (shard + 1) % self.shards, views

    def partitions_top(
        self, count: int, by: Rank = "queued", offset: int = 0
    ) -> tuple[int, list[PartitionView]]:
        """The partitions of every sub-queue ranked as `Queue.partitions_top` ranks them.

        Each sub-queue gives its first `offset + count` (the only ones that
        can be among the first `offset + count` of all); those are merged
        by the ranking and sliced. The count is the sum of the sub-queues'.
        `offset + count` is one sub-queue's TOP count: at most 10,000.
        """
        check_int("count", count, 1, _MAX_TOP)
        check_int("offset", offset, 0, _MAX_TOP - count)
        pages = [queue.partitions_top(offset + count, by) for queue in self.sub_queues]
        ranked = _RANKED_BY[by]
        merged = heapq.merge(*(views for _, views in pages), key=ranked)
        return (
            sum(ranked_count for ranked_count, _ in pages),
            list(itertools.islice(merged, offset, offset + count)),
        )

    def partitions(self, count: int | None = None) -> Iterator[PartitionView]:
        """Every partition of every sub-queue, sub-queue by sub-queue, in bounded steps."""
        for queue in self.sub_queues:
            yield from queue.partitions(count)

    def dead(self, count: int = 10) -> list[DeadItem]:
        """The oldest `count` dead-lettered items of all sub-queues, oldest first, unwrapped."""
        merged = heapq.merge(
            *(queue.dead(count) for queue in self.sub_queues), key=lambda d: d.died_at_ms
        )
        return [
            dataclasses.replace(item, payload=unwrap(item.payload)[1])
            for _, item in zip(range(count), merged, strict=False)
        ]

    # Item life.
    def _targets(self, partition: str | None) -> tuple[Queue, ...]:
        return self.sub_queues if partition is None else (self.queue_for(partition),)

    def jobs(self, *ids: str, partition: str | None = None) -> list[JobStatus]:
        """Where each item is: in `partition`'s sub-queue, or (None) in the
        first sub-queue that knows it (`unknown` when none does)."""
        answers = [queue.jobs(*ids) for queue in self._targets(partition)]
        return [
            next((job for job in each if job.state != "unknown"), each[0])
            for each in zip(*answers, strict=True)
        ]

    def job(self, item_id: str, *, partition: str | None = None) -> JobStatus:
        """Where one item is (see `jobs`)."""
        return self.jobs(item_id, partition=partition)[0]

    def result(
        self, item_id: str, *, block_ms: int | None = None, partition: str | None = None
    ) -> JobStatus | None:
        """The job's status once it finished, as `Queue.result` (waiting up to
        `block_ms`), from `partition`'s sub-queue, or (None) from the first
        sub-queue that knows the id; None at once when none does (an id is
        known from its ENQUEUE on: wait for a job once it is enqueued, or
        name its partition)."""
        queue = (
            next((q for q in self.sub_queues if q.job(item_id).state != "unknown"), None)
            if partition is None
            else self.queue_for(partition)
        )
        return None if queue is None else queue.result(item_id, block_ms=block_ms)

    def revive(self, *ids: str, partition: str | None = None) -> int:
        """Put dead items back: in `partition`'s sub-queue, or (None) in every sub-queue.

        Ids are deduplicated per sub-queue only: without `partition`, an id
        dead in two sub-queues is revived in both.
        """
        return sum(queue.revive(*ids) for queue in self._targets(partition))

    def cancel(self, *ids: str, partition: str | None = None) -> int:
        """Delete items in any state: in `partition`'s sub-queue, or (None) in every one.

        Ids are deduplicated per sub-queue only: without `partition`, an id
        present in two sub-queues (two partitions) is cancelled in both.
        """
        return sum(queue.cancel(*ids) for queue in self._targets(partition))

    # Settings.
    def policies(self) -> list[Policy]:
        """Each sub-queue's policy (`set_policy` keeps them the same)."""
        return [queue.policy() for queue in self.sub_queues]

    def policy(self) -> Policy:
        """The policy of every sub-queue.

        `VTRRError` when they differ (a `set_policy` that failed part-way):
        a single answer would then be wrong for some tenants; `policies()`
        shows each, and `set_policy` again sets them all.
        """
        each = self.policies()
        if any(policy != each[0] for policy in each):
            raise VTRRError(
                f"{self.name}: the sub-queues' policies differ ({each}): set_policy sets every one"
            )
        return each[0]

    def set_policy(
        self,
        *,
        max_timeouts: Limit = None,
        max_nacks: Limit = None,
        default_concurrency: Limit = None,
        default_rate: Rate | Literal["NONE"] | None = None,
        concurrency: Limit = None,
        rate: Rate | Literal["NONE"] | None = None,
        default_max_queued: Limit = None,
        result_ttl_ms: Limit = None,
        dedup_ms: Limit = None,
    ) -> None:
        """Set the dead-letter policy, the default cap, rate and MAX-QUEUED,
        the queue's own cap and rate, and how long finished jobs are kept on
        every sub-queue, in turn, as given (a default rate or MAX-QUEUED is
        each sub-queue's: a tenant's items all go to one, so it holds whole
        for every tenant, and so does a finished job's record).

        The queue's own `concurrency` and `rate` therefore hold per
        sub-queue: K sub-queues lease up to K times the cap and spend up to
        K times the rate. One limit over them all would need a counter that
        every sub-queue's LEASE reads atomically, and they live in different
        slots; dividing it among them would not make one either (a quiet
        sub-queue's part could not go to a busy one's tenants, and a cap or
        rate below K does not divide). To hold the whole to about N, give
        N // K: each sub-queue hands its part out in fair turn.
        """
        for queue in self.sub_queues:
            queue.set_policy(
                max_timeouts=max_timeouts,
                max_nacks=max_nacks,
                default_concurrency=default_concurrency,
                default_rate=default_rate,
                concurrency=concurrency,
                rate=rate,
                default_max_queued=default_max_queued,
                result_ttl_ms=result_ttl_ms,
                dedup_ms=dedup_ms,
            )

    def limit(self, partition: str) -> PartitionSettings:
        """A partition's own settings, from its sub-queue."""
        return self.queue_for(partition).limit(partition)

    def set_limit(
        self,
        partition: str,
        *,
        concurrency: Limit = None,
        share: int | None = None,
        rate: Rate | Literal["NONE"] | None = None,
        max_queued: Limit = None,
    ) -> None:
        """A partition's cap, share, rate and MAX-QUEUED, in its sub-queue (a
        partition lives in one sub-queue, so its cap, rate and MAX-QUEUED
        hold whole).

        A share holds within the partition's sub-queue; the rotation counts
        partitions, not shares, so across sub-queues it is not kept.
        """
        self.queue_for(partition).set_limit(
            partition, concurrency=concurrency, share=share, rate=rate, max_queued=max_queued
        )

    def pause(self, partition: str) -> bool:
        """Stop leasing a partition's items, in its sub-queue; False if it already was."""
        return self.queue_for(partition).pause(partition)

    def resume(self, partition: str) -> bool:
        """Lease a paused partition's items again, in its sub-queue; False if it was not paused."""
        return self.queue_for(partition).resume(partition)

    def recount(self) -> int:
        """VTRR.RECOUNT in every sub-queue: how many partition records it changed in all."""
        return sum(queue.recount() for queue in self.sub_queues)

    def convert(self, layout: Layout) -> int:
        """Move every sub-queue to `layout`; how many moved."""
        return sum(queue.convert(layout) for queue in self.sub_queues)

    def inspect(self, key: str) -> list[Any]:
        """VTRR.INSPECT of `key` in every sub-queue, in sub-queue order (a diagnostic)."""
        return [queue.inspect(key) for queue in self.sub_queues]
