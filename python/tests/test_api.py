"""Queue, AsyncQueue and ShardedQueue keep the same methods (#31, #44).

`Queue` and `AsyncQueue` inherit one method per command from
`commands.QueueCommands`: a command function that is not one of them fails
here, and so does a method shown (`inspect.signature`, type hints, its
docstring) otherwise than its function, less the queue name. A method
written in `Queue` and forgotten in `AsyncQueue` (or given other parameters
or another docstring there) fails here; so does one a worker or an operator
uses on a `Queue` that `ShardedQueue` lacks, unless it is listed below with
the reason. The comparisons themselves are tested too, on classes grown for
the purpose, so a check that compares nothing cannot pass unnoticed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterator
from typing import Any

import redis
import redis.asyncio

import vtrr
from vtrr import commands
from vtrr.sharded import ShardedQueue, ShardedStats

Methods = dict[str, Callable[..., Any]]


def public_methods(cls: type) -> Methods:
    """Every public method of `cls`, inherited ones too (not `object`'s)."""
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def text(hint: object, renames: dict[str, str]) -> str:
    """A resolved type as text (module-qualified, so imports do not matter), names renamed."""
    if isinstance(hint, type):
        shown = (
            hint.__qualname__
            if hint.__module__ == "builtins"
            else f"{hint.__module__}.{hint.__qualname__}"
        )
    else:
        shown = repr(hint)
    for old, new in renames.items():
        shown = re.sub(rf"\b{re.escape(old)}\b", new, shown)
    return shown


def parameters(method: Callable[..., Any], renames: dict[str, str] | None = None) -> list[str]:
    """Each parameter as `kind name: type = default`, types renamed as given."""
    hints = typing.get_type_hints(method)
    return [
        f"{param.kind.name} {param.name}"
        + (f": {text(hints[param.name], renames or {})}" if param.name in hints else "")
        + ("" if param.default is inspect.Parameter.empty else f" = {param.default!r}")
        for param in inspect.signature(method).parameters.values()
    ]


def returns(method: Callable[..., Any], renames: dict[str, str] | None = None) -> str:
    return text(typing.get_type_hints(method).get("return"), renames or {})


def sync_async_differences(sync: type, async_: type) -> list[str]:
    """How `async_` is not `sync` with every method a coroutine; empty when it is."""
    mine, theirs = public_methods(sync), public_methods(async_)
    problems = [
        f"{name}: in {sync.__name__}, not in {async_.__name__}"
        for name in mine.keys() - theirs.keys()
    ]
    problems += [
        f"{name}: in {async_.__name__}, not in {sync.__name__}"
        for name in theirs.keys() - mine.keys()
    ]
    for name in sorted(mine.keys() & theirs.keys()):
        blocking, awaited = mine[name], theirs[name]
        gives = returns(blocking)
        if gives.startswith("collections.abc.Iterator["):
            # An iterator's twin is an async generator (`async for`).
            if not inspect.isasyncgenfunction(awaited):
                problems.append(f"{name}: not an async generator in {async_.__name__}")
            gives = gives.replace("Iterator", "AsyncIterator", 1)
        elif not inspect.iscoroutinefunction(awaited):
            problems.append(f"{name}: not a coroutine in {async_.__name__}")
        if parameters(blocking) != parameters(awaited):
            problems.append(f"{name}: {parameters(blocking)} != {parameters(awaited)}")
        if gives != returns(awaited):
            problems.append(f"{name}: returns {returns(awaited)}, not {gives}")
        if blocking.__doc__ != awaited.__doc__:
            problems.append(f"{name}: documented otherwise in {async_.__name__}")
    return problems


def test_queue_and_async_queue_have_the_same_methods() -> None:
    assert len(public_methods(vtrr.Queue)) >= 30
    assert sync_async_differences(vtrr.Queue, vtrr.AsyncQueue) == []


def test_the_comparison_finds_a_method_added_to_one_side_only() -> None:
    class Grown(vtrr.Queue):
        def purge(self) -> int:
            return 0

    class Drifted(vtrr.AsyncQueue):
        async def lease(  # type: ignore[override]
            self, lease_ms: int, *, block_ms: int | None = None, count: int = 1
        ) -> vtrr.Lease | None:
            return None

        def stats(self) -> vtrr.Stats:  # type: ignore[override]
            raise NotImplementedError

        async def partitions(self, count: int | None = None) -> Iterator[vtrr.PartitionView]:  # type: ignore[override]
            raise NotImplementedError

    assert sync_async_differences(Grown, vtrr.AsyncQueue) == ["purge: in Grown, not in AsyncQueue"]
    assert [problem.split(": ", 1) for problem in sync_async_differences(vtrr.Queue, Drifted)] == [
        ["lease", f"{parameters(vtrr.Queue.lease)} != {parameters(Drifted.lease)}"],
        ["lease", "documented otherwise in Drifted"],
        ["partitions", "not an async generator in Drifted"],
        ["partitions", "returns collections.abc.Iterator[vtrr.types.PartitionView],"
                       " not collections.abc.AsyncIterator[vtrr.types.PartitionView]"],
        ["partitions", "documented otherwise in Drifted"],
        ["stats", "not a coroutine in Drifted"],
        ["stats", "documented otherwise in Drifted"],
    ]  # fmt: skip


def test_every_public_method_is_documented() -> None:
    assert [
        f"{cls.__name__}.{name}"
        for cls in (vtrr.Queue, vtrr.AsyncQueue, ShardedQueue)
        for name, method in public_methods(cls).items()
        if not method.__doc__
    ] == []


def command_functions() -> Methods:
    """Every public function of `vtrr.commands` that makes a `Command`."""
    return {
        name: function
        for name, function in inspect.getmembers(commands, inspect.isfunction)
        if function.__module__ == commands.__name__
        and not name.startswith("_")
        and typing.get_origin(typing.get_type_hints(function)["return"]) is commands.Command
    }


# Command functions that are no queue's method, and why.
NOT_METHODS = {
    # NACK with every option, as a worker's round trip sends it; a queue has
    # `nack` and `release`.
    "give_back",
    # One VTRR.RESULT; a queue's `result` sends it in slices of a long wait
    # (`result_waits`), each within the client's socket timeout.
    "result",
}


def shown_differences(queue: type) -> list[str]:
    """How `queue`'s command methods are not their functions, less the queue name."""
    functions = command_functions()
    methods = {
        name: method
        for name, method in public_methods(queue).items()
        if inspect.unwrap(method) is not method  # a command's, not written in `queue`
    }
    problems = [
        f"{name}: not a method of {queue.__name__}"
        for name in sorted(functions.keys() - methods.keys() - NOT_METHODS)
    ]
    for name, method in sorted(methods.items()):
        function = functions.get(name)
        if inspect.unwrap(method) is not function:
            problems.append(f"{name}: runs {inspect.unwrap(method).__name__}")
            continue
        _queue_name, *expected = parameters(function)
        if parameters(method) != ["POSITIONAL_OR_KEYWORD self", *expected]:
            problems.append(f"{name}: {parameters(method)} != {expected}")
        (reply,) = typing.get_args(typing.get_type_hints(function)["return"])
        if returns(method) != text(reply, {}):
            problems.append(f"{name}: returns {returns(method)}, not {text(reply, {})}")
        if not method.__doc__ or method.__doc__ != function.__doc__:
            problems.append(f"{name}: documented otherwise than {function.__name__}")
    return problems


def test_every_command_is_a_method_shown_as_its_function() -> None:
    assert len(command_functions()) >= 30
    assert shown_differences(vtrr.Queue) == []
    assert shown_differences(vtrr.AsyncQueue) == []


def test_the_command_comparison_finds_a_method_missing_or_shown_otherwise() -> None:
    class Drifted(vtrr.Queue):
        dead = None  # type: ignore[assignment]
        partition = commands.QueueMethod(commands.pause)  # type: ignore[assignment]

        @functools.wraps(commands.lease, assigned=(), updated=())  # claims to be its method
        def lease(self, lease_ms: int) -> int:  # type: ignore[override]
            """Not how `commands.lease` is documented."""
            return 0

    assert shown_differences(Drifted) == [
        "dead: not a method of Drifted",
        f"lease: {parameters(Drifted.lease)} != {parameters(commands.lease)[1:]}",
        "lease: returns int, not vtrr.types.Lease | None",
        "lease: documented otherwise than lease",
        "partition: runs pause",
    ]


def test_a_command_method_sends_its_arguments_with_the_queue_name() -> None:
    sent: list[tuple[commands.Arg, ...]] = []

    class Blocking(vtrr.Queue):
        def run[T](self, command: commands.Command[T]) -> T:
            sent.append(command.args)
            return command.parse(1)

    class Awaited(vtrr.AsyncQueue):
        async def run[T](self, command: commands.Command[T]) -> T:
            sent.append(command.args)
            return command.parse(1)

    lease = vtrr.Lease("job-1", b"", "token", 0, 0)
    assert Blocking(redis.Redis(), "files").ack(lease, costs=[7]) == 1
    assert asyncio.run(Awaited(redis.asyncio.Redis(), "files").ack(lease, costs=[7])) == 1
    Blocking(redis.Redis(), "files").set_limit("bob", share=3)
    assert sent == [
        commands.ack("files", lease, costs=[7]).args,
        commands.ack("files", lease, costs=[7]).args,
        commands.set_limit("files", "bob", share=3).args,
    ]


# What a `Queue` has that a `ShardedQueue` does not, and why. Nothing else may be missing.
NOT_SHARDED = {
    # A Command names one queue: send it through a sub-queue, `sq.sub_queues[i].run(...)`.
    "run",
    # One LEASE ... ACK is one queue's round trip, and its AckedLeases holds
    # plain Leases; a worker uses `exchange`, which does the same over the
    # sub-queues with ShardedLeases.
    "ack_and_lease",
    # A schedule fires in one queue, and its runs would carry no weight
    # envelope; and moving a schedule to a tenant of another sub-queue could
    # not be one atomic change. Set one in its tenant's sub-queue,
    # `sq.queue_for(partition).schedule(..., payload=wrap(payload, weight))`.
    "schedule",
    "unschedule",
    "schedule_view",
    "schedules_page",
    "schedules",
}
# The types a ShardedQueue takes and gives in their place: its leases carry
# their sub-queue, and its stats each sub-queue's own.
SHARDED_TYPES = {
    "vtrr.types.Fenced": "vtrr.sharded.ShardedLease",
    "vtrr.types.Lease": "vtrr.sharded.ShardedLease",
    "vtrr.types.Stats": "vtrr.sharded.ShardedStats",
}
# Keyword-only parameters a ShardedQueue adds: ids are unique per sub-queue,
# so the partition names the one to search (None: every one).
EXTRA_PARAMETERS = {
    "job": ["KEYWORD_ONLY partition: str | None = None"],
    "jobs": ["KEYWORD_ONLY partition: str | None = None"],
    "revive": ["KEYWORD_ONLY partition: str | None = None"],
    "cancel": ["KEYWORD_ONLY partition: str | None = None"],
    "result": ["KEYWORD_ONLY partition: str | None = None"],
}
# Returns that are one queue's answer on a Queue, and an answer over every
# sub-queue on a ShardedQueue.
OTHER_RETURNS = {
    "convert": "int",  # how many sub-queues moved, not whether the one queue did
    "inspect": "list[typing.Any]",  # the key of every sub-queue, in sub-queue order
}


def sharded_differences(queue: type, sharded: type) -> list[str]:
    """How `sharded` differs from `queue` beyond the differences stated above."""
    mine, theirs = public_methods(queue), public_methods(sharded)
    problems = [
        f"{name}: not in {sharded.__name__}"
        for name in sorted(mine.keys() - theirs.keys() - NOT_SHARDED)
    ]
    problems += [
        f"{name}: listed as missing, but there" for name in sorted(NOT_SHARDED & theirs.keys())
    ]
    for name in sorted(mine.keys() & theirs.keys()):
        expected = parameters(mine[name], SHARDED_TYPES) + EXTRA_PARAMETERS.get(name, [])
        if parameters(theirs[name]) != expected:
            problems.append(f"{name}: {parameters(theirs[name])} != {expected}")
        expected_return = OTHER_RETURNS.get(name, returns(mine[name], SHARDED_TYPES))
        if returns(theirs[name]) != expected_return:
            problems.append(f"{name}: returns {returns(theirs[name])}, not {expected_return}")
    return problems


def test_sharded_queue_has_what_a_worker_and_an_operator_use() -> None:
    assert sharded_differences(vtrr.Queue, ShardedQueue) == []


def test_the_sharded_comparison_finds_a_missing_method() -> None:
    class Grown(vtrr.Queue):
        def purge(self) -> int:
            return 0

    class Shrunk(ShardedQueue):
        dead = None  # type: ignore[assignment]

    assert sharded_differences(Grown, ShardedQueue) == ["purge: not in ShardedQueue"]
    assert sharded_differences(vtrr.Queue, Shrunk) == ["dead: not in Shrunk"]


# The Stats fields a ShardedStats has not, and why.
NOT_IN_SHARDED_STATS = {
    "current_virtual_time",  # virtual times do not add up across sub-queues (see .shards)
    "layout",  # each sub-queue has its own (see .shards)
}


def test_sharded_stats_has_the_fields_of_stats() -> None:
    stats = {field.name for field in dataclasses.fields(vtrr.Stats)}
    sharded = {field.name for field in dataclasses.fields(ShardedStats)}
    assert stats - sharded == NOT_IN_SHARDED_STATS
