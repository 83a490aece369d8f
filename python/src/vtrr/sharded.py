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
sub-queue. `stats`, `dead`, `check` and `partitions` read every sub-queue.

Worker side: `lease` runs the **weighted rotation** of docs/scaling.md: a
charge per sub-queue, weight/n_i added to sub-queue i's charge for each item
leased there (n_i its backlogged partitions, re-read from VTRR.PARTITIONS
every `read_every` leases), the next lease from the non-empty sub-queue with
the lowest charge; a sub-queue back from empty rejoins at the lowest charge
of the busy ones. The LEASE reply does not carry an item's weight, so every
payload is wrapped in a small envelope holding it (`wrap`/`unwrap`); the
returned `ShardedLease` carries the caller's own payload and remembers its
sub-queue, so `ack`, `renew` and `nack` go back to the right one.

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
import threading
import time
from collections.abc import Iterable, Iterator

import redis

from .client import Queue
from .commands import Limit
from .exchange import Exchange, Exchanged
from .limits import MAX_WEIGHT, check_item
from .types import (
    DeadItem,
    Item,
    Layout,
    Lease,
    NackOutcome,
    PartitionSettings,
    PartitionView,
    Policy,
    Stats,
    encode,
)

_M64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

_MAGIC = b"\x1fvtrr:"
_SEP = b"\x1f"


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


@dataclasses.dataclass(frozen=True, slots=True)
class ShardedStats:
    """VTRR.STATS over every sub-queue.

    The counts are sums over the sub-queues (`partitions` sums each one's
    entries of `partition_virtual_time`: a partition is in one sub-queue only,
    so nothing is counted twice); `next_due_ms` and `next_expiry_ms` are the
    earliest of any sub-queue. Virtual times do not add up across
    sub-queues: each sub-queue's own `Stats` is in `shards`.
    """

    queued: int
    held: int
    inflight: int
    expired: int
    delayed: int
    dead: int
    partitions: int
    paused_partitions: int
    capped_partitions: int
    next_due_ms: int | None
    next_expiry_ms: int | None
    shards: tuple[Stats, ...]


def _earliest(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


class ShardedQueue:
    """One queue's tenants over `shards` sub-queues `{name:0}` … `{name:K-1}`.

    `client` is a `redis.RedisCluster` (each sub-queue routed by its tag) or
    a `redis.Redis` (all sub-queues on one server). `name` must not contain
    braces: the sub-queues' names are hash tags of their own. `read_every`:
    how many of this worker's leases between two reads of the sub-queues'
    backlogged partitions (VTRR.PARTITIONS, O(partitions) each).
    `block_slice_ms`: how long one blocking LEASE waits on one sub-queue
    before the worker looks at all of them again.
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
        self.client = client
        self.name = name
        self.shards = shards
        self.read_every = read_every
        self.block_slice_ms = block_slice_ms
        self.sub_queues: tuple[Queue, ...] = tuple(
            Queue(client, f"{{{name}:{i}}}", retry_seconds=retry_seconds) for i in range(shards)
        )
        # The weighted rotation: this worker's state (re-entrant: a sweep records its lease).
        self._rotation = threading.RLock()
        self._charge = [0.0] * shards
        self._backlogged = [0] * shards
        self._since_read = read_every  # read before the first lease
        self._turn = 0  # the sub-queue the next blocking wait goes to

    def __repr__(self) -> str:
        return f"ShardedQueue({self.name!r}, shards={self.shards})"

    # Routing.
    def shard_of(self, partition: str) -> int:
        """The index of the partition's sub-queue."""
        return shard_of(partition, self.shards)

    def queue_for(self, partition: str) -> Queue:
        """The partition's sub-queue."""
        return self.sub_queues[self.shard_of(partition)]

    def _split(self, items: Iterable[Item]) -> dict[int, list[Item]]:
        groups: dict[int, list[Item]] = {}
        for item in items:
            check_item(item)
            wrapped = dataclasses.replace(item, payload=wrap(item.payload, item.weight))
            groups.setdefault(self.shard_of(item.partition), []).append(wrapped)
        if not groups:
            raise ValueError("needs at least one item")
        return groups

    # Adding items.
    def enqueue(self, partition: str, item_id: str, payload: bytes | str, weight: int = 1) -> bool:
        """Add one item to its partition's sub-queue; False when its id is already there."""
        return self.enqueue_many([Item(partition, item_id, payload, weight)]) == 1

    def enqueue_many(self, items: Iterable[Item]) -> int:
        """Add items, one atomic VTRR.ENQUEUE per sub-queue; returns how many were new.

        Atomic per sub-queue only: the items of each sub-queue go in one call,
        in turn. Every item is checked first (a bad one refuses the whole
        batch before anything is sent), but an error of the server or the
        connection on one sub-queue's call leaves the calls before it done.
        """
        return sum(
            self.sub_queues[i].enqueue_many(group) for i, group in self._split(items).items()
        )

    def defer(self, delay_ms: int, items: Iterable[Item]) -> int:
        """Add items leasable `delay_ms` from now, one call per sub-queue (as `enqueue_many`)."""
        return sum(
            self.sub_queues[i].defer(delay_ms, group) for i, group in self._split(items).items()
        )

    # Leases: the weighted rotation.
    def _read_counts(self) -> None:
        """n_i for every sub-queue: partitions with queued > 0, not paused, under their cap."""
        counts = []
        for queue in self.sub_queues:
            names = set()
            for view in queue.partitions(count=1000):
                cap = view.concurrency_in_force
                if view.queued > 0 and not view.paused and (cap is None or view.leased < cap):
                    names.add(view.partition)  # HSCAN may list one twice
            counts.append(len(names))
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
            reply.id, payload, reply.token, reply.timeouts, reply.nacks, shard, weight
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
                reply = self.sub_queues[i].lease(lease_ms)
                if reply is not None:
                    return self._leased(i, reply)
                self._backlogged[i] = 0  # empty: skipped until the next read
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
        """
        deadline = None if not block_ms else time.monotonic() + block_ms / 1000
        while True:
            with self._rotation:
                leased = self._sweep(lease_ms)
                if leased is not None or block_ms is None:
                    return leased
                i, self._turn = self._turn, (self._turn + 1) % self.shards
            wait_ms = self.block_slice_ms
            if deadline is not None:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return None
                wait_ms = min(wait_ms, left_ms)
            # The wait itself holds no lock: other threads lease meanwhile.
            reply = self.sub_queues[i].lease(lease_ms, block_ms=wait_ms)
            with self._rotation:
                self._since_read = self.read_every  # read the counts again next time
                if reply is not None:
                    return self._leased(i, reply)

    def ack(self, *leases: ShardedLease) -> int:
        """Fenced ACK, one call per sub-queue concerned: how many were still current."""
        groups: dict[int, list[ShardedLease]] = {}
        for lease in leases:
            groups.setdefault(lease.shard, []).append(lease)
        if not groups:
            raise ValueError("ack needs at least one lease")
        return sum(self.sub_queues[i].ack(*group) for i, group in groups.items())

    def renew(self, lease: ShardedLease, lease_ms: int) -> bool:
        """Fenced re-lease for `lease_ms` from now, in the lease's sub-queue."""
        return self.sub_queues[lease.shard].renew(lease, lease_ms)

    def nack(
        self, lease: ShardedLease, *, delay_ms: int | None = None, dead: bool = False
    ) -> NackOutcome | None:
        """Give a leased item back to its sub-queue: at once, after `delay_ms`, or dead."""
        return self.sub_queues[lease.shard].nack(lease, delay_ms=delay_ms, dead=dead)

    def release(self, lease: ShardedLease) -> bool:
        """Give a leased item back unrun to its sub-queue, no nack counted."""
        return self.sub_queues[lease.shard].release(lease)

    def exchange(self, sent: Exchange) -> Exchanged:
        """A worker's round trip (`vtrr.exchange`) over the sub-queues.

        Each lease is settled and renewed in its own sub-queue, then the
        rotation leases up to `sent.count` items: a call per lease and per
        sub-queue visited, not one round trip (the sub-queues live on
        different nodes).
        """
        leases: dict[tuple[str, str], ShardedLease] = {}

        def own(lease: object) -> ShardedLease:
            if not isinstance(lease, ShardedLease):
                raise TypeError(f"a ShardedQueue settles ShardedLeases, not {lease!r}")
            return lease

        nacked: list[NackOutcome | None] = []
        for give in sent.nacks:
            lease = own(give.lease)
            if give.release:
                nacked.append(NackOutcome.QUEUED if self.release(lease) else None)
            else:
                nacked.append(self.nack(lease, delay_ms=give.delay_ms, dead=give.dead))
        renewed = tuple(self.renew(own(lease), sent.lease_ms) for lease in sent.renews)
        acked = tuple(self.ack(own(lease)) == 1 for lease in sent.acks)
        while len(leases) < sent.count:
            got = self.lease(sent.lease_ms)
            if got is None:
                break
            leases[(got.id, got.token)] = got
        if not leases and sent.count and sent.block_ms is not None:
            got = self.lease(sent.lease_ms, block_ms=sent.block_ms)
            if got is not None:
                leases[(got.id, got.token)] = got
        return Exchanged(acked, tuple(nacked), renewed, list(leases.values()))  # type: ignore[arg-type]

    def reclaim(self, limit: int | None = None) -> int:
        """Take expired leases back now in every sub-queue (`limit` per sub-queue)."""
        return sum(queue.reclaim(limit) for queue in self.sub_queues)

    # Reading.
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
            paused_partitions=sum(s.paused_partitions for s in each),
            capped_partitions=sum(s.capped_partitions for s in each),
            next_due_ms=_earliest(s.next_due_ms for s in each),
            next_expiry_ms=_earliest(s.next_expiry_ms for s in each),
            shards=each,
        )

    def check(self) -> list[str]:
        """Every sub-queue's VTRR.CHECK problems, each prefixed with its sub-queue's name."""
        return [f"{q.name}: {problem}" for q in self.sub_queues for problem in q.check()]

    def partition(self, partition: str) -> PartitionView:
        """One partition's counts and settings, from its sub-queue."""
        return self.queue_for(partition).partition(partition)

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

    def set_policy(
        self,
        *,
        max_timeouts: Limit = None,
        max_nacks: Limit = None,
        default_concurrency: Limit = None,
    ) -> None:
        """Set the dead-letter policy and default cap on every sub-queue, in turn."""
        for queue in self.sub_queues:
            queue.set_policy(
                max_timeouts=max_timeouts,
                max_nacks=max_nacks,
                default_concurrency=default_concurrency,
            )

    def limit(self, partition: str) -> PartitionSettings:
        return self.queue_for(partition).limit(partition)

    def set_limit(
        self, partition: str, *, concurrency: Limit = None, share: int | None = None
    ) -> None:
        """A partition's cap and share, in its sub-queue.

        A share holds within the partition's sub-queue; the rotation counts
        partitions, not shares, so across sub-queues it is not kept.
        """
        self.queue_for(partition).set_limit(partition, concurrency=concurrency, share=share)

    def pause(self, partition: str) -> bool:
        return self.queue_for(partition).pause(partition)

    def resume(self, partition: str) -> bool:
        return self.queue_for(partition).resume(partition)

    def convert(self, layout: Layout) -> int:
        """Move every sub-queue to `layout`; how many moved."""
        return sum(queue.convert(layout) for queue in self.sub_queues)
