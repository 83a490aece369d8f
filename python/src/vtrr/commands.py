"""Each vtrr command, once: its arguments, their checks, its reply's parser, its docs.

A command is a function of the queue's name and the method's arguments
that returns a `Command`, the arguments to send and how to read the reply:
nothing here does any I/O. `QueueCommands` makes each one a method of a
queue, the queue supplying its name and sending the command with its `run`:
`Queue` inherits them blocking and `AsyncQueue` awaited, so the two cannot
differ. `ShardedQueue` sends them through its sub-queues.

A new command is a function here and a line in `QueueCommands`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import typing
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from inspect import Parameter, Signature, iscoroutinefunction, signature
from types import MethodType
from typing import Any, Concatenate, Literal, Protocol, Self, cast, overload

from .errors import InvalidArgument
from .limits import (
    MAX_BLOCK_MS,
    MAX_COST,
    MAX_PRIORITY,
    check_int,
    check_item,
    check_reason,
    check_result,
)
from .types import (
    AckedLeases,
    DeadItem,
    Fenced,
    Item,
    JobState,
    JobStatus,
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
    Totals,
    decode,
    encode,
)

Arg = bytes | str | int


@dataclasses.dataclass(frozen=True, slots=True)
class Command[T]:
    """A command ready to send, and how to read its reply."""

    args: tuple[Arg, ...]
    parse: Callable[[Any], T]


class BlockingRunner(Protocol):
    """A queue that sends a command and returns its parsed reply: a `Queue`."""

    @property
    def name(self) -> str: ...

    def run[T](self, command: Command[T]) -> T: ...


class AsyncRunner(Protocol):
    """A queue whose `run` is a coroutine function: an `AsyncQueue`."""

    @property
    def name(self) -> str: ...

    def run[T](self, command: Command[T]) -> Coroutine[Any, Any, T]: ...


class QueueMethod[**P, T]:
    """A command as a method of a queue, which supplies the name and runs it.

    On a `BlockingRunner` the method returns the reply, on an `AsyncRunner`
    it is a coroutine function; either is shown (`help()`,
    `inspect.signature`, `typing.get_type_hints`) as the command's function
    with `self` for the queue name, returning the parsed reply.
    """

    def __init__(self, build: Callable[Concatenate[str, P], Command[T]]) -> None:
        def blocking(queue: BlockingRunner, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return queue.run(build(queue.name, *args, **kwargs))

        async def awaited(queue: AsyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await queue.run(build(queue.name, *args, **kwargs))

        self._blocking = _shown_as(blocking, build)
        self._awaited = _shown_as(awaited, build)

    def __set_name__(self, owner: type, name: str) -> None:
        for method in (self._blocking, self._awaited):
            method.__qualname__ = f"{owner.__qualname__}.{name}"

    @overload
    def __get__(
        self, queue: None, owner: type[BlockingRunner]
    ) -> Callable[Concatenate[BlockingRunner, P], T]: ...
    @overload
    def __get__(
        self, queue: None, owner: type[AsyncRunner]
    ) -> Callable[Concatenate[AsyncRunner, P], Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, queue: None, owner: type) -> Self: ...
    @overload
    def __get__(self, queue: BlockingRunner, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, queue: AsyncRunner, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, queue: object, owner: type) -> object:
        if not hasattr(owner, "run"):  # read on `QueueCommands` itself
            return self
        method = self._awaited if _runs_awaited(owner) else self._blocking
        return method if queue is None else MethodType(method, queue)


@functools.cache  # a method is looked up at every call: look at its class once
def _runs_awaited(owner: type[BlockingRunner | AsyncRunner]) -> bool:
    return iscoroutinefunction(owner.run)


def _shown_as[M: Callable[..., object]](method: M, build: Callable[..., Command[Any]]) -> M:
    """`method`, which runs `build`'s command, described as `build` is: its name,
    docstring and parameters, `self` in place of the queue name, returning the
    parsed reply (`T` of its `Command[T]`)."""
    hints = typing.get_type_hints(build)
    reply = typing.get_args(hints.pop("return"))[0]
    reply = None if reply is type(None) else reply  # shown as `-> None`
    queue, *parameters = signature(build).parameters.values()
    del hints[queue.name]
    functools.update_wrapper(method, build, assigned=("__module__", "__name__", "__doc__"))
    method.__annotations__ = {**hints, "return": reply}
    # `__signature__`, which `inspect.signature` reads, is unknown to a function's type.
    vars(method)["__signature__"] = Signature(
        [
            Parameter("self", Parameter.POSITIONAL_OR_KEYWORD),
            *(parameter.replace(annotation=hints[parameter.name]) for parameter in parameters),
        ],
        return_annotation=reply,
    )
    return method


def _int(reply: Any) -> int:
    return int(reply)


def _bool(reply: Any) -> bool:
    return int(reply) == 1


def _ok(reply: Any) -> None:
    return None


def _opt_int(reply: Any) -> int | None:
    return None if reply is None else int(reply)


def _fields(reply: Any) -> dict[str, Any]:
    """A map reply as a dict: RESP3 gives a map, RESP2 a flat field/value array."""
    if isinstance(reply, Mapping):
        return {decode(k): v for k, v in reply.items()}
    pairs = list(reply)
    return {decode(pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)}


# Adding items.
def _adding(
    command: str, queue: str, timing: tuple[Arg, ...], items: Iterable[Item], priority: int
) -> tuple[Arg, ...]:
    """`VTRR.ENQUEUE` or `VTRR.DEFER`: the level checked first, then every item."""
    level = check_int("priority", priority, -MAX_PRIORITY, MAX_PRIORITY)
    item_args: list[Arg] = []
    for item in map(check_item, items):
        item_args += [encode(item.partition), encode(item.id), item.weight, item.payload]
    if not item_args:
        raise ValueError(f"{command.split('.')[1].lower()} needs at least one item")
    # No `PRIORITY` at the default level, 0.
    return (command, queue, *timing, *(("PRIORITY", level) if level else ()), *item_args)


def enqueue(
    queue: str,
    /,
    partition: str,
    item_id: str,
    payload: bytes | str,
    weight: int = 1,
    *,
    priority: int = 0,
) -> Command[bool]:
    """Add one item; False when its id is already in the queue's life, or
    finished less than the policy's `dedup_ms` ago (skipped).

    `priority` (-100..100, larger first) is strict between levels and
    fair between partitions inside one. Raises `PartitionFull` when the
    partition has its MAX-QUEUED items waiting.
    """
    item = Item(partition, item_id, payload, weight)
    return Command(_adding("VTRR.ENQUEUE", queue, (), [item], priority), _bool)


def enqueue_many(queue: str, /, items: Iterable[Item], *, priority: int = 0) -> Command[int]:
    """Add items in one atomic command, at `priority`; returns how many were new.

    Refused whole (`PartitionFull`, nothing added) when the items would take
    any partition past its MAX-QUEUED; ids already in the queue take no room.
    """
    return Command(_adding("VTRR.ENQUEUE", queue, (), items, priority), _int)


def defer(
    queue: str, /, delay_ms: int, items: Iterable[Item], *, priority: int = 0
) -> Command[int]:
    """Add items that become leasable `delay_ms` after the server's clock now.

    A delayed item waits, so it counts toward MAX-QUEUED as `enqueue_many`'s do.
    """
    return Command(_adding("VTRR.DEFER", queue, (delay_ms,), items, priority), _int)


# Leases.
def _lease(reply: Any) -> Lease:
    item_id, payload, token, timeouts, nacks, partition = reply
    return Lease(
        decode(item_id), bytes(payload), decode(token), int(timeouts), int(nacks), decode(partition)
    )


def _lease_one(reply: Any) -> Lease | None:
    return None if reply is None else _lease(reply)


def _lease_many(reply: Any) -> list[Lease]:
    return [] if reply is None else [_lease(entry) for entry in reply]


def _lease_args(queue: str, lease_ms: int, block_ms: int | None) -> tuple[Arg, ...]:
    """`VTRR.LEASE` with what every `Lease` holds: the nack count, the partition."""
    args: tuple[Arg, ...] = ("VTRR.LEASE", queue, lease_ms, "WITHCOUNTERS", "WITHPARTITION")
    if block_ms is not None:
        args += ("BLOCK", block_ms)
    return args


def lease(queue: str, /, lease_ms: int, *, block_ms: int | None = None) -> Command[Lease | None]:
    """Lease the next item (waiting up to `block_ms`, 0 forever); None when none came."""
    return Command(_lease_args(queue, lease_ms, block_ms), _lease_one)


def lease_many(
    queue: str, /, lease_ms: int, count: int, *, block_ms: int | None = None
) -> Command[list[Lease]]:
    """Lease up to `count` items."""
    return Command((*_lease_args(queue, lease_ms, block_ms), "COUNT", count), _lease_many)


def leases_with[L: Fenced](
    leases: Sequence[L],
    costs: Sequence[int] | None,
    results: Sequence[bytes | str] | None = None,
) -> list[tuple[L, int | None, bytes | str | None]]:
    """Each lease with its cost and its result (None without `costs`,
    `results`), refused as ACK refuses them: no lease, not one cost or
    result per lease, or both (ACKCOST and ACKRESULT are two commands)."""
    for given, what in ((costs, "cost"), (results, "result")):
        if given is not None and len(given) != len(leases):
            raise ValueError(f"{len(given)} {what}s for {len(leases)} leases: one {what} per lease")
    if costs is not None and results is not None:
        raise ValueError("costs and results cannot be combined: VTRR.ACKRESULT reports no cost")
    if not leases:
        raise ValueError("ack needs at least one lease")
    return list(
        zip(
            leases,
            [None] * len(leases) if costs is None else costs,
            [None] * len(leases) if results is None else results,
            strict=True,
        )
    )


def _ack_form(costs: Sequence[int] | None, results: Sequence[bytes | str] | None) -> str:
    """How leases are finished: `ACK`, `ACKCOST` with `costs`, `ACKRESULT` with `results`."""
    return "ACKCOST" if costs is not None else "ACKRESULT" if results is not None else "ACK"


def _ack_args(
    leases: Sequence[Fenced], costs: Sequence[int] | None, results: Sequence[bytes | str] | None
) -> list[Arg]:
    """`<id> <token> ...` pairs, or triples with each one's cost or result."""
    args: list[Arg] = []
    for fenced, cost, result in leases_with(leases, costs, results):
        args += [encode(fenced.id), fenced.token]
        if cost is not None:
            args.append(check_int("cost", cost, 0, MAX_COST))
        if result is not None:
            args.append(check_result(result))
    return args


def ack(
    queue: str,
    /,
    *leases: Fenced,
    costs: Sequence[int] | None = None,
    results: Sequence[bytes | str] | None = None,
) -> Command[int]:
    """Fenced ACK: how many of the leases were still current (and are now done).

    With `costs` (one per lease, in the weights' units: what each job
    really cost), `VTRR.ACKCOST`: each partition is charged its job's
    cost in place of the weight it was queued with. With `results` (one
    per lease, what each job returned: bytes, or a str sent as UTF-8, at
    most 1 MiB), `VTRR.ACKRESULT`: each is kept as its job's result while
    the policy's `result_ttl_ms` keeps outcomes (`result()` reads it); a
    lost lease keeps nothing. One or the other.
    """
    form = _ack_form(costs, results)
    return Command((f"VTRR.{form}", queue, *_ack_args(leases, costs, results)), _int)


def _acked_leases(reply: Any) -> AckedLeases:
    acked, leases = reply
    return AckedLeases(tuple(int(took) == 1 for took in acked), _lease_many(leases))


def ack_and_lease(
    queue: str,
    /,
    done: Iterable[Fenced],
    lease_ms: int,
    count: int,
    *,
    block_ms: int | None = None,
    costs: Sequence[int] | None = None,
    results: Sequence[bytes | str] | None = None,
) -> Command[AckedLeases]:
    """ACK the `done` leases (charging `costs`, or keeping `results`, as
    `ack`) and lease up to `count` items, in one round trip (`VTRR.LEASE ...
    ACK`, `ACKCOST` or `ACKRESULT`)."""
    acks = _ack_args(list(done), costs, results)
    return Command(
        (
            *_lease_args(queue, lease_ms, block_ms),
            "COUNT",
            count,
            _ack_form(costs, results),
            *acks,
        ),
        _acked_leases,
    )


def renew(queue: str, /, lease: Fenced, lease_ms: int, *, cost: int | None = None) -> Command[bool]:
    """Fenced re-lease for `lease_ms` from now; False when the lease is lost.

    With `cost`, what the job has cost since its last report (or its lease),
    charged to its partition now; the ACK that finishes it (`costs=`)
    then reports only the rest.
    """
    args: tuple[Arg, ...] = ("VTRR.RENEW", queue, encode(lease.id), lease.token, lease_ms)
    if cost is not None:
        args += ("COST", check_int("cost", cost, 0, MAX_COST))
    return Command(args, _bool)


def _nack_outcome(reply: Any) -> NackOutcome | None:
    return None if reply is None else NackOutcome(decode(reply))


def give_back(
    queue: str,
    /,
    lease: Fenced,
    *,
    delay_ms: int | None = None,
    dead: bool = False,
    release: bool = False,
    reason: str | bytes | None = None,
) -> Command[NackOutcome | None]:
    """`VTRR.NACK ... WITHSTATE` with any of its options: `nack` and `release`,
    and a worker's round trip, which sends either."""
    args: tuple[Arg, ...] = ("VTRR.NACK", queue, encode(lease.id), lease.token)
    if delay_ms is not None:
        args += ("DELAY", delay_ms)
    if dead:
        args += ("DEAD",)
    if release:
        args += ("RELEASE",)
    if reason is not None:
        args += ("REASON", check_reason(reason))
    return Command((*args, "WITHSTATE"), _nack_outcome)


def nack(
    queue: str,
    /,
    lease: Fenced,
    *,
    delay_ms: int | None = None,
    dead: bool = False,
    reason: str | bytes | None = None,
) -> Command[NackOutcome | None]:
    """Give a leased item back: at once, after `delay_ms`, or to the dead letters.

    `reason`: what failed (1 to 4096 bytes; a str is sent as UTF-8), kept
    with the item as its last error until it leaves: `dead()` shows it
    (`DeadItem.last_error`). Where it went (the queue's MAX-NACKS may
    dead-letter it), or None when the lease was no longer current.
    """
    return give_back(queue, lease, delay_ms=delay_ms, dead=dead, reason=reason)


def release(queue: str, /, lease: Fenced) -> Command[bool]:
    """Give a leased item back unrun: requeued at once, no nack counted."""
    released = give_back(queue, lease, release=True)
    return Command(released.args, lambda reply: reply is not None)


def reclaim(queue: str, /, limit: int | None = None) -> Command[int]:
    """Take expired leases back now (the module's timer does it anyway)."""
    args: tuple[Arg, ...] = ("VTRR.RECLAIM", queue)
    if limit is not None:
        args += ("LIMIT", limit)
    return Command(args, _int)


# Reading the queue.
def _totals(f: dict[str, Any]) -> Totals:
    """The `*-total` fields STATS and PARTITIONS share."""
    return Totals(
        enqueued=int(f["enqueued-total"]),
        leased=int(f["leased-total"]),
        acked=int(f["acked-total"]),
        nacked=int(f["nacked-total"]),
        dead=int(f["dead-total"]),
        expired=int(f["expired-total"]),
    )


def _stats(reply: Any) -> Stats:
    # Modules before this one spelled STATS' fields with underscores: both read.
    f = {key.replace("_", "-"): value for key, value in _fields(reply).items()}
    return Stats(
        queued=int(f["queued"]),
        held=int(f["held"]),
        inflight=int(f["inflight"]),
        expired=int(f["expired"]),
        delayed=int(f["delayed"]),
        dead=int(f["dead"]),
        partitions=int(f["partitions"]),
        queued_partitions=int(f["queued-partitions"]),
        paused_partitions=int(f["paused-partitions"]),
        capped_partitions=int(f["capped-partitions"]),
        current_virtual_time=int(f["current-virtual-time"]),
        next_due_ms=_opt_int(f["next-due-ms"]),
        next_expiry_ms=_opt_int(f["next-expiry-ms"]),
        layout=cast(Layout, decode(f["layout"])),
        oldest_waiting_ms=_opt_int(f["oldest-waiting-ms"]),
        totals=_totals(f),
        tokens=_opt_int(f.get("tokens")),  # absent from a module before the queue's rate
    )


def stats(queue: str, /) -> Command[Stats]:
    """The queue's counts (`VTRR.STATS`)."""
    return Command(("VTRR.STATS", queue), _stats)


def check(queue: str, /) -> Command[list[str]]:
    """The invariants the queue breaks; empty when it is sound (O(N))."""
    return Command(("VTRR.CHECK", queue), lambda reply: [decode(p) for p in reply])


def _rate(f: Mapping[str, Any], prefix: str = "", suffix: str = "") -> Rate | None:
    amount = f.get(f"{prefix}rate{suffix}")
    if amount is None:  # none, or a module from before the field
        return None
    per_ms, burst = f[f"{prefix}per-ms{suffix}"], f[f"{prefix}burst{suffix}"]
    return Rate(amount=int(amount), per_ms=int(per_ms), burst=int(burst))


def _view(reply: Any) -> PartitionView:
    f = _fields(reply)
    return PartitionView(
        partition=decode(f["partition"]),
        queued=int(f["queued"]),
        held=int(f["held"]),
        leased=int(f["leased"]),
        delayed=int(f["delayed"]),
        dead=int(f["dead"]),
        paused=int(f["paused"]) == 1,
        share=int(f["share"]),
        concurrency=_opt_int(f["concurrency"]),
        concurrency_in_force=_opt_int(f["concurrency-in-force"]),
        virtual_time=_opt_int(f["virtual-time"]),
        waiting_ms=_opt_int(f["waiting-ms"]),
        rate=_rate(f),
        rate_in_force=_rate(f, suffix="-in-force"),
        tokens=_opt_int(f["tokens"]),
        next_token_ms=_opt_int(f["next-token-ms"]),
        totals=_totals(f),
        # Absent from a module before MAX-QUEUED.
        max_queued=_opt_int(f.get("max-queued")),
        max_queued_in_force=_opt_int(f.get("max-queued-in-force")),
    )


def _page(reply: Any) -> tuple[int, list[PartitionView]]:
    cursor, entries = reply
    return int(cursor), [_view(entry) for entry in entries]


def partition(queue: str, /, partition: str) -> Command[PartitionView]:
    """One partition's counts and settings (all zeros if never seen)."""
    return Command(
        ("VTRR.PARTITIONS", queue, "PARTITION", encode(partition)),
        lambda reply: _page(reply)[1][0],
    )


def partitions_page(
    queue: str, /, cursor: int = 0, count: int | None = None
) -> Command[tuple[int, list[PartitionView]]]:
    """One step of the partition scan; go on until the cursor is 0."""
    args: tuple[Arg, ...] = ("VTRR.PARTITIONS", queue, "CURSOR", cursor)
    if count is not None:
        args += ("COUNT", count)
    return Command(args, _page)


def partitions_top(
    queue: str, /, count: int, by: Rank = "queued", offset: int = 0
) -> Command[tuple[int, list[PartitionView]]]:
    """The partitions ranked by the server, worst first: most queued,
    longest waiting (``oldest``), most leased, most dead. Returns how many
    partitions the ranking holds and ``count`` of them from ``offset``."""
    args: tuple[Arg, ...] = ("VTRR.PARTITIONS", queue, "TOP", count, "BY", by.upper())
    if offset:
        args += ("OFFSET", offset)
    return Command(args, _page)


def _dead(reply: Any) -> list[DeadItem]:
    return [
        DeadItem(
            id=decode(item_id),
            payload=bytes(payload),
            partition=None if partition is None else decode(partition),
            weight=_opt_int(weight),
            timeouts=int(timeouts),
            nacks=int(nacks),
            died_at_ms=int(died_at_ms),
            reason=decode(reason),
            last_error=None if last_error is None else decode(last_error),
        )
        for (
            item_id,
            payload,
            partition,
            weight,
            timeouts,
            nacks,
            died_at_ms,
            reason,
            last_error,
        ) in reply
    ]


def dead(queue: str, /, count: int = 10) -> Command[list[DeadItem]]:
    """The oldest dead-lettered items, oldest first."""
    return Command(("VTRR.DEAD", queue, "COUNT", count), _dead)


def _job(reply: Any) -> JobStatus:
    fields = _fields(reply)

    def text(name: str) -> str | None:
        value = fields[name]
        return None if value is None else decode(value)

    return JobStatus(
        id=decode(fields["id"]),
        state=cast(JobState, decode(fields["state"])),
        partition=text("partition"),
        weight=_opt_int(fields["weight"]),
        priority=_opt_int(fields["priority"]),
        timeouts=_opt_int(fields["timeouts"]),
        nacks=_opt_int(fields["nacks"]),
        expires_ms=_opt_int(fields["expires-ms"]),
        due_ms=_opt_int(fields["due-ms"]),
        dead_ms=_opt_int(fields["dead-ms"]),
        reason=text("reason"),
        last_error=text("last-error"),
        # Absent from a module before finished jobs were kept.
        finished_ms=_opt_int(fields.get("finished-ms")),
        result=None if fields.get("result") is None else bytes(fields["result"]),
    )


def jobs(queue: str, /, *ids: str) -> Command[list[JobStatus]]:
    """Where each item is, in order: queued, held, leased, delayed, dead,
    done or cancelled (finished, while the policy keeps outcomes), or
    unknown (never enqueued, or finished and nothing of it kept)."""
    encoded = [encode(item_id) for item_id in ids]
    if not encoded:
        raise ValueError("jobs needs at least one id")
    return Command(("VTRR.JOB", queue, *encoded), lambda reply: [_job(entry) for entry in reply])


def job(queue: str, /, item_id: str) -> Command[JobStatus]:
    """Where one item is, and what the queue keeps of it there (see `jobs`)."""
    return Command(("VTRR.JOB", queue, encode(item_id)), lambda reply: _job(reply[0]))


def result(
    queue: str, /, item_id: str, *, block_ms: int | None = None
) -> Command[JobStatus | None]:
    """`VTRR.RESULT`: the job's status once it finished (`done`, `dead` or
    `cancelled`), else None; with `block_ms`, the server waits up to that
    long (0: forever) for it to finish. One call: a queue's `result()`
    sends it in slices (`result_waits`)."""
    args: tuple[Arg, ...] = ("VTRR.RESULT", queue, encode(item_id))
    if block_ms is not None:
        args += ("BLOCK", block_ms)
    return Command(args, lambda reply: None if reply is None else _job(reply))


RESULT_SLICE_MS = 1_000
"""The longest one BLOCK of a wait for a result: the worker's own wait, which
the client's `socket_timeout` must allow anyway."""


def result_waits(block_ms: int | None) -> Iterator[int | None]:
    """The BLOCK of each `VTRR.RESULT` a wait of `block_ms` (None: none; 0:
    forever) is sent as, until one replies: at most `RESULT_SLICE_MS` each,
    so no redis-py `socket_timeout` cuts a long wait short, and together
    no longer than `block_ms`. A job that finishes between two is not
    missed: its outcome stays while the policy keeps it, and without that
    no BLOCK would see it either."""
    if block_ms is None:
        yield None
        return
    check_int("block_ms", block_ms, 0, MAX_BLOCK_MS)
    if block_ms == 0:
        while True:
            yield RESULT_SLICE_MS
    deadline = time.monotonic() + block_ms / 1000
    left_ms = block_ms
    while left_ms > 0:
        yield min(left_ms, RESULT_SLICE_MS)
        left_ms = math.ceil((deadline - time.monotonic()) * 1000)


# Item life.
def _ids(command: str, queue: str, ids: Iterable[str]) -> Command[int]:
    encoded = [encode(item_id) for item_id in ids]
    if not encoded:
        raise ValueError(f"{command.split('.')[1].lower()} needs at least one id")
    return Command((command, queue, *encoded), _int)


def revive(queue: str, /, *ids: str) -> Command[int]:
    """Put dead items back in the queue, as if freshly enqueued; how many were revived."""
    return _ids("VTRR.REVIVE", queue, ids)


def cancel(queue: str, /, *ids: str) -> Command[int]:
    """Delete items in any state (queued, delayed, dead or leased); how many were cancelled."""
    return _ids("VTRR.CANCEL", queue, ids)


# Recurring schedules.
def schedule(
    queue: str,
    /,
    name: str,
    *,
    every_ms: int | None = None,
    cron: str | None = None,
    tz: str | None = None,
    partition: str,
    payload: bytes | str,
    weight: int = 1,
    missed: Missed = "one",
) -> Command[int]:
    """Set a recurring schedule; returns its next run's due time (Unix ms).

    The server enqueues each run in `partition` as the item
    `schedule:<name>:<due-ms>`: every `every_ms` (at its multiples since the
    epoch) or when the `cron` pattern matches in `tz` (UTC when None);
    exactly one of the two. `missed`: the runs that fell due while none
    could fire (a stopped server), `"skip"`, `"one"` (the latest) or
    `"all"`. Setting it again with the same timing keeps its next run.
    """
    timing: tuple[Arg, ...]
    # Exactly one of `every_ms` and `cron`, checked here as the server does.
    if every_ms is not None and cron is None:
        timing = ("EVERY", every_ms)
    elif cron is not None and every_ms is None:
        timing = ("CRON", cron)
    else:
        both = every_ms is not None
        raise InvalidArgument(
            "every_ms and cron cannot be combined" if both else "every_ms or cron is required"
        )
    if tz is not None:
        timing += ("TZ", tz)
    if not isinstance(payload, bytes | str):
        raise TypeError(f"payload must be bytes or str, not {type(payload).__name__}")
    options = ("PARTITION", encode(partition), "PAYLOAD", payload, "WEIGHT", weight)
    return Command(
        ("VTRR.SCHEDULE", queue, encode(name), *timing, *options, "MISSED", missed), _int
    )


def unschedule(queue: str, /, *names: str) -> Command[int]:
    """Remove schedules (their runs already enqueued stay); how many existed."""
    encoded = [encode(name) for name in names]
    if not encoded:
        raise ValueError("unschedule needs at least one schedule")
    return Command(("VTRR.UNSCHEDULE", queue, *encoded), _int)


def _opt_text(reply: Any) -> str | None:
    return None if reply is None else decode(reply)


def _schedule(reply: Any) -> ScheduleView:
    f = _fields(reply)
    payload = f.get("payload")
    return ScheduleView(
        name=decode(f["schedule"]),
        every_ms=_opt_int(f.get("every-ms")),
        cron=_opt_text(f.get("cron")),
        tz=_opt_text(f.get("tz")),
        missed=cast(Missed | None, _opt_text(f.get("missed"))),
        partition=_opt_text(f.get("partition")),
        weight=_opt_int(f.get("weight")),
        payload=None if payload is None else bytes(payload),
        next_ms=_opt_int(f["next-ms"]),
        runs=[int(run) for run in f["runs"]],
    )


def schedule_view(queue: str, /, name: str, runs: int = 1) -> Command[ScheduleView | None]:
    """One schedule with its next `runs` due times (0 to 20); None if there is none."""
    return Command(
        ("VTRR.SCHEDULES", queue, "SCHEDULE", encode(name), "RUNS", runs),
        lambda reply: None if reply is None else _schedule(reply),
    )


def _schedules_page(reply: Any) -> tuple[int, list[ScheduleView]]:
    cursor, entries = reply
    return int(cursor), [_schedule(entry) for entry in entries]


def schedules_page(
    queue: str, /, cursor: int = 0, count: int | None = None, runs: int = 1
) -> Command[tuple[int, list[ScheduleView]]]:
    """One step of the schedule scan; go on until the cursor is 0."""
    args: tuple[Arg, ...] = ("VTRR.SCHEDULES", queue, "CURSOR", cursor)
    if count is not None:
        args += ("COUNT", count)
    return Command((*args, "RUNS", runs), _schedules_page)


# Settings.
Limit = int | Literal["NONE"] | None


def _limit_arg(option: str, value: Limit) -> tuple[Arg, ...]:
    return () if value is None else (option, value)


def _rate_args(rate: Rate | Literal["NONE"] | None, option: str = "RATE") -> tuple[Arg, ...]:
    if rate is None:
        return ()
    if rate == "NONE":
        return (option, "NONE")
    burst = () if rate.burst is None else ("BURST", rate.burst)
    return (option, rate.amount, "PER", rate.per_ms, *burst)


def _policy(reply: Any) -> Policy:
    f = _fields(reply)
    return Policy(
        max_timeouts=_opt_int(f["max-timeouts"]),
        max_nacks=_opt_int(f["max-nacks"]),
        default_concurrency=_opt_int(f["default-concurrency"]),
        default_rate=_rate(f, prefix="default-"),
        # Absent from a module before the queue's own limits, or before MAX-QUEUED.
        concurrency=_opt_int(f.get("concurrency")),
        rate=_rate(f),
        default_max_queued=_opt_int(f.get("default-max-queued")),
        # Absent from a module before finished jobs were kept.
        result_ttl_ms=_opt_int(f.get("result-ttl-ms")),
        dedup_ms=_opt_int(f.get("dedup-ms")),
    )


def policy(queue: str, /) -> Command[Policy]:
    """The dead-letter policy, the default cap, rate and MAX-QUEUED, the
    queue's own cap and rate, and how long finished jobs are kept (`VTRR.POLICY`)."""
    return Command(("VTRR.POLICY", queue), _policy)


def set_policy(
    queue: str,
    /,
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
) -> Command[None]:
    """Set the dead-letter policy, the default cap, rate and MAX-QUEUED (of
    every partition without its own), the queue's own cap and rate (on
    top of every partition's: `concurrency` items leased at once across the
    queue, `rate` one bucket every lease spends its item's weight from, both
    handed out in fair turn) and how long a finished job is kept: its
    outcome and result for `result_ttl_ms` (`result()`), its id for
    `dedup_ms` (an enqueue of it skipped meanwhile), the longer of the two
    for both; None leaves one as it is, "NONE" clears it."""
    options = (
        *_limit_arg("MAX-TIMEOUTS", max_timeouts),
        *_limit_arg("MAX-NACKS", max_nacks),
        *_limit_arg("DEFAULT-CONCURRENCY", default_concurrency),
        *_rate_args(default_rate, "DEFAULT-RATE"),
        *_limit_arg("CONCURRENCY", concurrency),
        *_rate_args(rate),
        *_limit_arg("DEFAULT-MAX-QUEUED", default_max_queued),
        *_limit_arg("RESULT-TTL", result_ttl_ms),
        *_limit_arg("DEDUP-MS", dedup_ms),
    )
    if not options:
        raise ValueError("set_policy needs at least one setting (None leaves one unchanged)")
    return Command(("VTRR.POLICY", queue, *options), _ok)


def _settings(reply: Any) -> PartitionSettings:
    f = _fields(reply)
    return PartitionSettings(
        concurrency=_opt_int(f["concurrency"]),
        paused=int(f["paused"]) == 1,
        share=int(f["share"]),
        rate=_rate(f),
        max_queued=_opt_int(f.get("max-queued")),  # absent from a module before MAX-QUEUED
    )


def limit(queue: str, /, partition: str) -> Command[PartitionSettings]:
    """A partition's own settings: its cap, whether it is paused, its share,
    its rate, its MAX-QUEUED."""
    return Command(("VTRR.LIMIT", queue, encode(partition)), _settings)


def set_limit(
    queue: str,
    /,
    partition: str,
    *,
    concurrency: Limit = None,
    share: int | None = None,
    rate: Rate | Literal["NONE"] | None = None,
    max_queued: Limit = None,
) -> Command[None]:
    """Sets what is given: a cap, a share, a rate limit, a MAX-QUEUED (`"NONE"`
    removes a cap, rate or MAX-QUEUED: the queue's default is then in force).

    `max_queued` is backpressure: the most items the partition may have
    waiting (queued or delayed). An enqueue or defer that would take it
    past that raises `PartitionFull` and enqueues nothing of the call.
    """
    options = (
        *_limit_arg("CONCURRENCY", concurrency),
        *_limit_arg("SHARE", share),
        *_rate_args(rate),
        *_limit_arg("MAX-QUEUED", max_queued),
    )
    if not options:
        raise ValueError("set_limit needs concurrency, share, rate or max_queued")
    return Command(("VTRR.LIMIT", queue, encode(partition), *options), _ok)


def pause(queue: str, /, partition: str) -> Command[bool]:
    """Stop leasing a partition's items (it still takes new ones); False if it already was."""
    return Command(("VTRR.PAUSE", queue, encode(partition)), _bool)


def resume(queue: str, /, partition: str) -> Command[bool]:
    """Lease a paused partition's items again; False if it was not paused."""
    return Command(("VTRR.RESUME", queue, encode(partition)), _bool)


def recount(queue: str, /) -> Command[int]:
    """Rewrite every partition's counts from the keys; how many partition records changed."""
    return Command(("VTRR.RECOUNT", queue), _int)


def convert(queue: str, /, layout: Layout) -> Command[bool]:
    """Move the queue to the other layout (one blocking O(N) call)."""
    return Command(("VTRR.CONVERT", queue, layout.upper()), _bool)


def inspect(queue: str, /, key: str) -> Command[Any]:
    """One logical key of the queue (a suffix: `queue`, `inflight`, ...), whole, as the
    keys layout has it, in either layout (`VTRR.INSPECT`, a diagnostic)."""
    return Command(("VTRR.INSPECT", queue, key), lambda reply: reply)


class QueueCommands:
    """Every command above but `give_back` as a method (see `QueueMethod`):
    `Queue` and `AsyncQueue` inherit them, each with its own `name` and `run`."""

    enqueue = QueueMethod(enqueue)
    enqueue_many = QueueMethod(enqueue_many)
    defer = QueueMethod(defer)
    lease = QueueMethod(lease)
    lease_many = QueueMethod(lease_many)
    ack = QueueMethod(ack)
    ack_and_lease = QueueMethod(ack_and_lease)
    renew = QueueMethod(renew)
    nack = QueueMethod(nack)
    release = QueueMethod(release)
    reclaim = QueueMethod(reclaim)
    stats = QueueMethod(stats)
    check = QueueMethod(check)
    partition = QueueMethod(partition)
    partitions_page = QueueMethod(partitions_page)
    partitions_top = QueueMethod(partitions_top)
    dead = QueueMethod(dead)
    job = QueueMethod(job)
    jobs = QueueMethod(jobs)
    revive = QueueMethod(revive)
    cancel = QueueMethod(cancel)
    schedule = QueueMethod(schedule)
    unschedule = QueueMethod(unschedule)
    schedule_view = QueueMethod(schedule_view)
    schedules_page = QueueMethod(schedules_page)
    policy = QueueMethod(policy)
    set_policy = QueueMethod(set_policy)
    limit = QueueMethod(limit)
    set_limit = QueueMethod(set_limit)
    pause = QueueMethod(pause)
    resume = QueueMethod(resume)
    recount = QueueMethod(recount)
    convert = QueueMethod(convert)
    inspect = QueueMethod(inspect)
