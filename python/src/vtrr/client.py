"""`Queue` and `AsyncQueue`: one method per vtrr command, over redis-py.

Both inherit the commands' methods from `commands.QueueCommands`; they
differ in how they send a command (`run`: a blocking or an awaited call).
Both take a redis-py client — `redis.Redis` or `redis.RedisCluster` (and
their `redis.asyncio` twins) — and a queue name. On a cluster the name must
hold a hash tag (`{files}`), as the module requires; the client routes each
command by it. While a cluster moves the queue's slot its commands answer
`TRYAGAIN`: both clients wait and send again until `retry_seconds` pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import redis
import redis.asyncio
import redis.exceptions

from . import commands, exchange
from .commands import Command, QueueCommands
from .errors import SlotMoving, translate
from .types import JobStatus, PartitionView, ScheduleView, encode

_RETRY_PAUSE_SECONDS = 0.05

# A queue's keys are `vtrr:<name>:<suffix>`, one suffix per logical key of the
# module (src/store/vocabulary.rs; tests/test_client.py compares): the keys layout
# writes each as a key of its own, the native layout the whole queue as one
# key of the module's type at the first, `vtrr:<name>:queue`.
QUEUE_KEY_SUFFIXES = (
    "queue", "current_virtual_time", "partition_virtual_time", "task", "meta",
    "inflight", "inflight_task", "lease", "timeouts", "delayed", "delayed_task",
    "nacks", "dead", "dead_task", "dead_reason", "policy", "held", "held_at",
    "partitions", "parking", "rank_queued", "rank_waiting", "rank_leased", "rank_dead",
    "totals", "throttled", "priority", "level_virtual_time", "last_error", "results",
    "finished", "schedules", "schedule_due",
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


def _documented_by[M: Callable[..., object]](blocking: Callable[..., object]) -> Callable[[M], M]:
    """An `AsyncQueue` method that is its `Queue` twin awaited, shown with its docstring."""

    def document(awaited: M) -> M:
        awaited.__doc__ = blocking.__doc__
        return awaited

    return document


class Queue(QueueCommands):
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

    def partitions(self, count: int | None = None) -> Iterator[PartitionView]:
        """Every partition, in bounded steps (a partition may appear twice, as in HSCAN)."""
        cursor = 0
        while True:
            cursor, views = self.partitions_page(cursor, count)
            yield from views
            if cursor == 0:
                return

    def schedules(self, count: int | None = None, runs: int = 1) -> Iterator[ScheduleView]:
        """Every schedule, in bounded steps (one may appear twice, as in HSCAN)."""
        cursor = 0
        while True:
            cursor, views = self.schedules_page(cursor, count, runs)
            yield from views
            if cursor == 0:
                return

    def result(self, item_id: str, *, block_ms: int | None = None) -> JobStatus | None:
        """The job's status once it finished: `done` (with its `result`, what
        it returned, while the policy's `result_ttl_ms` keeps it), `dead` or
        `cancelled`; None while it has not, or when nothing of it is kept.

        `block_ms`: wait up to that long (0: forever) for it to finish,
        woken by the ACK, dead-lettering or cancellation that finishes it;
        sent as BLOCKs of at most a second (`commands.result_waits`), so the
        client's `socket_timeout` does not cut the wait short. Waiting needs
        the policy to keep outcomes (`result_ttl_ms` or `dedup_ms`): an acked
        job is otherwise forgotten at once.
        """
        for wait_ms in commands.result_waits(block_ms):
            status = self.run(commands.result(self.name, item_id, block_ms=wait_ms))
            if status is not None:
                return status
        return None


class AsyncQueue(QueueCommands):
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

    @_documented_by(Queue.run)
    async def run[T](self, command: Command[T]) -> T:
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

    @_documented_by(Queue.exchange)
    async def exchange(self, sent: exchange.Exchange) -> exchange.Exchanged:
        batch = exchange.commands_of(self.name, sent)
        if len(batch) == 1:
            return exchange.read(sent, [await self.run(batch[0])])
        pipe = cast(Any, self.client).pipeline(transaction=False)
        for command in batch:
            pipe.execute_command(*command.args)
        replies = await pipe.execute(raise_on_error=False)
        return exchange.read(sent, _parsed(self.client, self.name, batch, replies))

    @_documented_by(Queue.exists)
    async def exists(self) -> bool:
        try:
            return int(await cast(Any, self.client).exists(*queue_keys(self.name))) > 0
        except _MOVING as error:
            raise SlotMoving(f"{self.name}: {error}") from error
        except redis.exceptions.ResponseError as error:
            raise translate(error, server_of(self.client)) from error

    @_documented_by(Queue.partitions)
    async def partitions(self, count: int | None = None) -> AsyncIterator[PartitionView]:
        cursor = 0
        while True:
            cursor, views = await self.partitions_page(cursor, count)
            for view in views:
                yield view
            if cursor == 0:
                return

    @_documented_by(Queue.schedules)
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

    @_documented_by(Queue.result)
    async def result(self, item_id: str, *, block_ms: int | None = None) -> JobStatus | None:
        for wait_ms in commands.result_waits(block_ms):
            status = await self.run(commands.result(self.name, item_id, block_ms=wait_ms))
            if status is not None:
                return status
        return None
