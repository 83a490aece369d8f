"""`Queue` and `AsyncQueue`: one method per vtrr command, over redis-py.

Both take a redis-py client — `redis.Redis` or `redis.RedisCluster` (and
their `redis.asyncio` twins) — and a queue name. On a cluster the name must
hold a hash tag (`{files}`), as the module requires; the client routes each
command by it. While a cluster moves the queue's slot its commands answer
`TRYAGAIN`: both clients wait and send again until `retry_seconds` pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, Literal, cast

import redis
import redis.asyncio
import redis.exceptions

from . import commands, exchange
from .commands import Command, Limit
from .errors import SlotMoving, translate
from .types import (
    AckedLeases,
    DeadItem,
    Fenced,
    Item,
    Layout,
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
    encode,
)

_RETRY_PAUSE_SECONDS = 0.05

# A queue's keys are `vtrr:<name>:<suffix>`, one suffix per logical key of the
# module (src/store/keys.rs; tests/test_client.py compares): the keys layout
# writes each as a key of its own, the native layout the whole queue as one
# key of the module's type at the first, `vtrr:<name>:queue`.
QUEUE_KEY_SUFFIXES = (
    "queue", "current_virtual_time", "partition_virtual_time", "task", "meta",
    "inflight", "inflight_task", "lease", "timeouts", "delayed", "delayed_task",
    "nacks", "dead", "dead_task", "dead_reason", "policy", "held", "held_at",
    "partitions", "parking", "rank_queued", "rank_waiting", "rank_leased", "rank_dead",
    "totals", "throttled", "priority", "level_virtual_time", "last_error", "schedules",
    "schedule_due",
)  # fmt: skip

# Errors a slot move answers with: TRYAGAIN, and a cluster client's own
# "gave up following redirections".
_MOVING = (redis.exceptions.TryAgainError, redis.exceptions.ClusterError)


def queue_keys(name: str) -> list[bytes]:
    """The name of every key queue `name` can have, in either layout.

    They share a cluster slot when `name` holds a hash tag (as a queue on a
    cluster must), and only then.
    """
    prefix = b"vtrr:" + encode(name) + b":"
    return [prefix + suffix.encode() for suffix in QUEUE_KEY_SUFFIXES]


def server_of(client: Any) -> str:
    """The server a redis-py client (blocking or asyncio) talks to, as an operator
    names it: its URL without credentials (a cluster's by its first node)."""
    if isinstance(client, redis.RedisCluster | redis.asyncio.RedisCluster):
        node = client.get_default_node()
        return f"redis://{node.host}:{node.port} (a node of a Redis Cluster)"
    pool = getattr(client, "connection_pool", None)
    options = getattr(pool, "connection_kwargs", None)
    if pool is None or not options:
        return type(client).__name__
    if "path" in options:
        return f"unix://{options['path']}?db={options.get('db', 0)}"
    tls = (redis.SSLConnection, redis.asyncio.SSLConnection)
    scheme = "rediss" if issubclass(pool.connection_class, tls) else "redis"
    return f"{scheme}://{options.get('host')}:{options.get('port')}/{options.get('db', 0)}"


def _parsed(client: Any, name: str, batch: list[Command[Any]], replies: list[Any]) -> list[Any]:
    """A pipeline's replies parsed; its first error raised as the client raises it."""
    values = []
    for command, reply in zip(batch, replies, strict=True):
        if isinstance(reply, _MOVING):
            raise SlotMoving(f"{name}: {reply}") from reply
        if isinstance(reply, redis.exceptions.ResponseError):
            raise translate(reply, server_of(client)) from reply
        if isinstance(reply, Exception):
            raise reply
        values.append(command.parse(reply))
    return values


class Queue:
    """A vtrr queue, over a blocking redis-py client."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        name: str,
        *,
        retry_seconds: float = 30.0,
    ) -> None:
        if not name:
            raise ValueError("queue name must not be empty")
        self.client = client
        self.name = name
        self.retry_seconds = retry_seconds

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def run[T](self, command: Command[T]) -> T:
        """Send one command (waiting out a slot move) and parse its reply."""
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                reply = cast(Any, self.client).execute_command(*command.args)
            except _MOVING as error:
                if time.monotonic() >= deadline:
                    raise SlotMoving(f"{self.name}: {error}") from error
                time.sleep(_RETRY_PAUSE_SECONDS)
                continue
            except redis.exceptions.ResponseError as error:
                raise translate(error, server_of(self.client)) from error
            return command.parse(reply)

    def exchange(self, sent: exchange.Exchange) -> exchange.Exchanged:
        """A worker's round trip (`vtrr.exchange`): its commands pipelined, read as one."""
        batch = exchange.commands_of(self.name, sent)
        if len(batch) == 1:
            return exchange.read(sent, [self.run(batch[0])])
        pipe = cast(Any, self.client).pipeline(transaction=False)
        for command in batch:
            pipe.execute_command(*command.args)
        replies = pipe.execute(raise_on_error=False)
        return exchange.read(sent, _parsed(self.client, self.name, batch, replies))

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
        """Add one item; False when its id is already in the queue's life (skipped).

        `priority` (-100..100, larger first) is strict between levels and
        fair between partitions inside one.
        """
        item = Item(partition, item_id, payload, weight)
        return self.run(commands.enqueue(self.name, [item], priority)) == 1

    def enqueue_many(self, items: Iterable[Item], *, priority: int = 0) -> int:
        """Add items in one atomic command, at `priority`; returns how many were new."""
        return self.run(commands.enqueue(self.name, items, priority))

    def defer(self, delay_ms: int, items: Iterable[Item], *, priority: int = 0) -> int:
        """Add items that become leasable `delay_ms` after the server's clock now."""
        return self.run(commands.defer(self.name, delay_ms, items, priority))

    # Leases.
    def lease(self, lease_ms: int, *, block_ms: int | None = None) -> Lease | None:
        """Lease the next item (waiting up to `block_ms`, 0 forever); None when none came."""
        return self.run(commands.lease(self.name, lease_ms, block_ms))

    def lease_many(self, lease_ms: int, count: int, *, block_ms: int | None = None) -> list[Lease]:
        """Lease up to `count` items."""
        return self.run(commands.lease_many(self.name, lease_ms, count, block_ms))

    def ack(self, *leases: Fenced, costs: Sequence[int] | None = None) -> int:
        """Fenced ACK: how many of the leases were still current (and are now done).

        With `costs` (one per lease, in the weights' units: what each job
        really cost), `VTRR.ACKCOST`: each partition is charged its job's
        cost in place of the weight it was queued with.
        """
        pairs = [(lease.id, lease.token) for lease in leases]
        return self.run(commands.ack(self.name, pairs, costs))

    def renew(self, lease: Fenced, lease_ms: int, *, cost: int | None = None) -> bool:
        """Fenced re-lease for `lease_ms` from now; False when the lease is lost.

        With `cost`, what the job has cost since its last report (or its lease),
        charged to its partition now; the ACK that finishes it (`costs=`)
        then reports only the rest.
        """
        return self.run(commands.renew(self.name, lease.id, lease.token, lease_ms, cost))

    def ack_and_lease(
        self,
        done: Iterable[Fenced],
        lease_ms: int,
        count: int,
        *,
        block_ms: int | None = None,
        costs: Sequence[int] | None = None,
    ) -> AckedLeases:
        """ACK the `done` leases (charging `costs`, as `ack`) and lease up to
        `count` items, in one round trip."""
        pairs = [(lease.id, lease.token) for lease in done]
        return self.run(commands.ack_and_lease(self.name, pairs, lease_ms, count, block_ms, costs))

    def nack(
        self,
        lease: Fenced,
        *,
        delay_ms: int | None = None,
        dead: bool = False,
        reason: str | bytes | None = None,
    ) -> NackOutcome | None:
        """Give a leased item back: at once, after `delay_ms`, or to the dead letters.

        `reason`: what failed (1 to 4096 bytes; a str is sent as UTF-8), kept
        with the item as its last error until it leaves: `dead()` shows it
        (`DeadItem.last_error`). Where it went (the queue's MAX-NACKS may
        dead-letter it), or None when the lease was no longer current.
        """
        return self.run(
            commands.nack(self.name, lease.id, lease.token, delay_ms, dead, reason=reason)
        )

    def release(self, lease: Fenced) -> bool:
        """Give a leased item back unrun: requeued at once, no nack counted."""
        outcome = self.run(commands.nack(self.name, lease.id, lease.token, release=True))
        return outcome is not None

    def reclaim(self, limit: int | None = None) -> int:
        """Take expired leases back now (the module's timer does it anyway)."""
        return self.run(commands.reclaim(self.name, limit))

    # Reading the queue.
    def exists(self) -> bool:
        """Whether the queue has any key on the server, in either layout.

        The module answers for a queue that does not exist as for an empty
        one (STATS all zeros, PAUSE makes it): this tells the two apart, with
        one EXISTS (split by slot on a cluster).
        """
        try:
            return int(cast(Any, self.client).exists(*queue_keys(self.name))) > 0
        except _MOVING as error:
            raise SlotMoving(f"{self.name}: {error}") from error
        except redis.exceptions.ResponseError as error:
            raise translate(error, server_of(self.client)) from error

    def stats(self) -> Stats:
        return self.run(commands.stats(self.name))

    def check(self) -> list[str]:
        """The invariants the queue breaks; empty when it is sound (O(N))."""
        return self.run(commands.check(self.name))

    def partition(self, partition: str) -> PartitionView:
        """One partition's counts and settings (all zeros if never seen)."""
        return self.run(commands.partition(self.name, partition))

    def partitions_page(
        self, cursor: int = 0, count: int | None = None
    ) -> tuple[int, list[PartitionView]]:
        """One step of the partition scan; go on until the cursor is 0."""
        return self.run(commands.partitions_page(self.name, cursor, count))

    def partitions_top(
        self, count: int, by: Rank = "queued", offset: int = 0
    ) -> tuple[int, list[PartitionView]]:
        """The partitions ranked by the server, worst first: most queued,
        longest waiting (``oldest``), most leased, most dead. Returns how many
        partitions the ranking holds and ``count`` of them from ``offset``."""
        return self.run(commands.partitions_top(self.name, count, by, offset))

    def partitions(self, count: int | None = None) -> Iterator[PartitionView]:
        """Every partition, in bounded steps (a partition may appear twice, as in HSCAN)."""
        cursor = 0
        while True:
            cursor, views = self.partitions_page(cursor, count)
            yield from views
            if cursor == 0:
                return

    def dead(self, count: int = 10) -> list[DeadItem]:
        """The oldest dead-lettered items, oldest first."""
        return self.run(commands.dead(self.name, count))

    # Item life.
    def revive(self, *ids: str) -> int:
        return self.run(commands.revive(self.name, ids))

    def cancel(self, *ids: str) -> int:
        return self.run(commands.cancel(self.name, ids))

    # Recurring schedules.
    def schedule(
        self,
        name: str,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
        tz: str | None = None,
        partition: str,
        payload: bytes | str,
        weight: int = 1,
        missed: Missed = "one",
    ) -> int:
        """Set a recurring schedule; returns its next run's due time (Unix ms).

        The server enqueues each run in `partition` as the item
        `schedule:<name>:<due-ms>`: every `every_ms` (at its multiples since the
        epoch) or when the `cron` pattern matches in `tz` (UTC when None);
        exactly one of the two. `missed`: the runs that fell due while none
        could fire (a stopped server), `"skip"`, `"one"` (the latest) or
        `"all"`. Setting it again with the same timing keeps its next run.
        """
        return self.run(
            commands.schedule(
                self.name, name, every_ms=every_ms, cron=cron, tz=tz, partition=partition,
                payload=payload, weight=weight, missed=missed,
            )
        )  # fmt: skip

    def unschedule(self, *names: str) -> int:
        """Remove schedules (their runs already enqueued stay); how many existed."""
        return self.run(commands.unschedule(self.name, names))

    def schedule_view(self, name: str, runs: int = 1) -> ScheduleView | None:
        """One schedule with its next `runs` due times (0 to 20); None if there is none."""
        return self.run(commands.schedule_view(self.name, name, runs))

    def schedules_page(
        self, cursor: int = 0, count: int | None = None, runs: int = 1
    ) -> tuple[int, list[ScheduleView]]:
        """One step of the schedule scan; go on until the cursor is 0."""
        return self.run(commands.schedules_page(self.name, cursor, count, runs))

    def schedules(self, count: int | None = None, runs: int = 1) -> Iterator[ScheduleView]:
        """Every schedule, in bounded steps (one may appear twice, as in HSCAN)."""
        cursor = 0
        while True:
            cursor, views = self.schedules_page(cursor, count, runs)
            yield from views
            if cursor == 0:
                return

    # Settings.
    def policy(self) -> Policy:
        return self.run(commands.get_policy(self.name))

    def set_policy(
        self,
        *,
        max_timeouts: Limit = None,
        max_nacks: Limit = None,
        default_concurrency: Limit = None,
        default_rate: Rate | Literal["NONE"] | None = None,
    ) -> None:
        """Set the dead-letter policy and the default cap and rate (of every
        partition without its own); None leaves one as it is, "NONE" clears it."""
        self.run(
            commands.set_policy(
                self.name, max_timeouts, max_nacks, default_concurrency, default_rate
            )
        )

    def limit(self, partition: str) -> PartitionSettings:
        return self.run(commands.get_limit(self.name, partition))

    def set_limit(
        self,
        partition: str,
        *,
        concurrency: Limit = None,
        share: int | None = None,
        rate: Rate | Literal["NONE"] | None = None,
    ) -> None:
        """Sets what is given: a cap, a share, a rate limit (`"NONE"` removes one)."""
        self.run(commands.set_limit(self.name, partition, concurrency, share, rate))

    def pause(self, partition: str) -> bool:
        return self.run(commands.pause(self.name, partition))

    def resume(self, partition: str) -> bool:
        return self.run(commands.resume(self.name, partition))

    def recount(self) -> int:
        return self.run(commands.recount(self.name))

    def convert(self, layout: Layout) -> bool:
        """Move the queue to the other layout (one blocking O(N) call)."""
        return self.run(commands.convert(self.name, layout))

    def inspect(self, key: str) -> Any:
        return self.run(commands.inspect(self.name, key))


class AsyncQueue:
    """A vtrr queue, over an asyncio redis-py client (`redis.asyncio`)."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        name: str,
        *,
        retry_seconds: float = 30.0,
    ) -> None:
        if not name:
            raise ValueError("queue name must not be empty")
        self.client = client
        self.name = name
        self.retry_seconds = retry_seconds

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"

    async def run[T](self, command: Command[T]) -> T:
        """Send one command (waiting out a slot move) and parse its reply."""
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                reply = await cast(Any, self.client).execute_command(*command.args)
            except _MOVING as error:
                if time.monotonic() >= deadline:
                    raise SlotMoving(f"{self.name}: {error}") from error
                await asyncio.sleep(_RETRY_PAUSE_SECONDS)
                continue
            except redis.exceptions.ResponseError as error:
                raise translate(error, server_of(self.client)) from error
            return command.parse(reply)

    async def exchange(self, sent: exchange.Exchange) -> exchange.Exchanged:
        batch = exchange.commands_of(self.name, sent)
        if len(batch) == 1:
            return exchange.read(sent, [await self.run(batch[0])])
        pipe = cast(Any, self.client).pipeline(transaction=False)
        for command in batch:
            pipe.execute_command(*command.args)
        replies = await pipe.execute(raise_on_error=False)
        return exchange.read(sent, _parsed(self.client, self.name, batch, replies))

    async def enqueue(
        self,
        partition: str,
        item_id: str,
        payload: bytes | str,
        weight: int = 1,
        *,
        priority: int = 0,
    ) -> bool:
        item = Item(partition, item_id, payload, weight)
        return await self.run(commands.enqueue(self.name, [item], priority)) == 1

    async def enqueue_many(self, items: Iterable[Item], *, priority: int = 0) -> int:
        return await self.run(commands.enqueue(self.name, items, priority))

    async def defer(self, delay_ms: int, items: Iterable[Item], *, priority: int = 0) -> int:
        return await self.run(commands.defer(self.name, delay_ms, items, priority))

    async def lease(self, lease_ms: int, *, block_ms: int | None = None) -> Lease | None:
        return await self.run(commands.lease(self.name, lease_ms, block_ms))

    async def lease_many(
        self, lease_ms: int, count: int, *, block_ms: int | None = None
    ) -> list[Lease]:
        return await self.run(commands.lease_many(self.name, lease_ms, count, block_ms))

    async def ack(self, *leases: Fenced, costs: Sequence[int] | None = None) -> int:
        pairs = [(lease.id, lease.token) for lease in leases]
        return await self.run(commands.ack(self.name, pairs, costs))

    async def renew(self, lease: Fenced, lease_ms: int, *, cost: int | None = None) -> bool:
        return await self.run(commands.renew(self.name, lease.id, lease.token, lease_ms, cost))

    async def ack_and_lease(
        self,
        done: Iterable[Fenced],
        lease_ms: int,
        count: int,
        *,
        block_ms: int | None = None,
        costs: Sequence[int] | None = None,
    ) -> AckedLeases:
        pairs = [(lease.id, lease.token) for lease in done]
        return await self.run(
            commands.ack_and_lease(self.name, pairs, lease_ms, count, block_ms, costs)
        )

    async def nack(
        self,
        lease: Fenced,
        *,
        delay_ms: int | None = None,
        dead: bool = False,
        reason: str | bytes | None = None,
    ) -> NackOutcome | None:
        return await self.run(
            commands.nack(self.name, lease.id, lease.token, delay_ms, dead, reason=reason)
        )

    async def release(self, lease: Fenced) -> bool:
        outcome = await self.run(commands.nack(self.name, lease.id, lease.token, release=True))
        return outcome is not None

    async def reclaim(self, limit: int | None = None) -> int:
        return await self.run(commands.reclaim(self.name, limit))

    async def exists(self) -> bool:
        try:
            return int(await cast(Any, self.client).exists(*queue_keys(self.name))) > 0
        except _MOVING as error:
            raise SlotMoving(f"{self.name}: {error}") from error
        except redis.exceptions.ResponseError as error:
            raise translate(error, server_of(self.client)) from error

    async def stats(self) -> Stats:
        return await self.run(commands.stats(self.name))

    async def check(self) -> list[str]:
        return await self.run(commands.check(self.name))

    async def partition(self, partition: str) -> PartitionView:
        return await self.run(commands.partition(self.name, partition))

    async def partitions_page(
        self, cursor: int = 0, count: int | None = None
    ) -> tuple[int, list[PartitionView]]:
        return await self.run(commands.partitions_page(self.name, cursor, count))

    async def partitions_top(
        self, count: int, by: Rank = "queued", offset: int = 0
    ) -> tuple[int, list[PartitionView]]:
        return await self.run(commands.partitions_top(self.name, count, by, offset))

    async def partitions(self, count: int | None = None) -> AsyncIterator[PartitionView]:
        cursor = 0
        while True:
            cursor, views = await self.partitions_page(cursor, count)
            for view in views:
                yield view
            if cursor == 0:
                return

    async def dead(self, count: int = 10) -> list[DeadItem]:
        return await self.run(commands.dead(self.name, count))

    async def revive(self, *ids: str) -> int:
        return await self.run(commands.revive(self.name, ids))

    async def cancel(self, *ids: str) -> int:
        return await self.run(commands.cancel(self.name, ids))

    async def schedule(
        self,
        name: str,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
        tz: str | None = None,
        partition: str,
        payload: bytes | str,
        weight: int = 1,
        missed: Missed = "one",
    ) -> int:
        return await self.run(
            commands.schedule(
                self.name, name, every_ms=every_ms, cron=cron, tz=tz, partition=partition,
                payload=payload, weight=weight, missed=missed,
            )
        )  # fmt: skip

    async def unschedule(self, *names: str) -> int:
        return await self.run(commands.unschedule(self.name, names))

    async def schedule_view(self, name: str, runs: int = 1) -> ScheduleView | None:
        return await self.run(commands.schedule_view(self.name, name, runs))

    async def schedules_page(
        self, cursor: int = 0, count: int | None = None, runs: int = 1
    ) -> tuple[int, list[ScheduleView]]:
        return await self.run(commands.schedules_page(self.name, cursor, count, runs))

    async def schedules(
        self, count: int | None = None, runs: int = 1
    ) -> AsyncIterator[ScheduleView]:
        cursor = 0
        while True:
            cursor, views = await self.schedules_page(cursor, count, runs)
            for view in views:
                yield view
            if cursor == 0:
                return

    async def policy(self) -> Policy:
        return await self.run(commands.get_policy(self.name))

    async def set_policy(
        self,
        *,
        max_timeouts: Limit = None,
        max_nacks: Limit = None,
        default_concurrency: Limit = None,
        default_rate: Rate | Literal["NONE"] | None = None,
    ) -> None:
        await self.run(
            commands.set_policy(
                self.name, max_timeouts, max_nacks, default_concurrency, default_rate
            )
        )

    async def limit(self, partition: str) -> PartitionSettings:
        return await self.run(commands.get_limit(self.name, partition))

    async def set_limit(
        self,
        partition: str,
        *,
        concurrency: Limit = None,
        share: int | None = None,
        rate: Rate | Literal["NONE"] | None = None,
    ) -> None:
        await self.run(commands.set_limit(self.name, partition, concurrency, share, rate))

    async def pause(self, partition: str) -> bool:
        return await self.run(commands.pause(self.name, partition))

    async def resume(self, partition: str) -> bool:
        return await self.run(commands.resume(self.name, partition))

    async def recount(self) -> int:
        return await self.run(commands.recount(self.name))

    async def convert(self, layout: Layout) -> bool:
        return await self.run(commands.convert(self.name, layout))

    async def inspect(self, key: str) -> Any:
        return await self.run(commands.inspect(self.name, key))
