"""Each vtrr command as its arguments and the parser of its reply.

`Queue` and `AsyncQueue` differ only in how they send a command (a blocking
or an awaited call); what they send and how they read the reply is here,
once, so the two stay the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from .errors import InvalidArgument
from .limits import MAX_COST, MAX_PRIORITY, check_int, check_item, check_reason
from .types import (
    AckedLeases,
    DeadItem,
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


def _item_args(items: Iterable[Item]) -> list[Arg]:
    args: list[Arg] = []
    for item in map(check_item, items):
        args += [encode(item.partition), encode(item.id), item.weight, item.payload]
    return args


def _priority_args(priority: int) -> list[Arg]:
    """`PRIORITY <level>` (nothing for level 0), the level checked first."""
    level = check_int("priority", priority, -MAX_PRIORITY, MAX_PRIORITY)
    return ["PRIORITY", level] if level else []


def enqueue(name: str, items: Iterable[Item], priority: int = 0) -> Command[int]:
    level = _priority_args(priority)
    item_args = _item_args(items)
    if not item_args:
        raise ValueError("enqueue needs at least one item")
    return Command(("VTRR.ENQUEUE", name, *level, *item_args), _int)


def defer(name: str, delay_ms: int, items: Iterable[Item], priority: int = 0) -> Command[int]:
    level = _priority_args(priority)
    item_args = _item_args(items)
    if not item_args:
        raise ValueError("defer needs at least one item")
    return Command(("VTRR.DEFER", name, delay_ms, *level, *item_args), _int)


def _lease(reply: Any) -> Lease:
    item_id, payload, token, timeouts, nacks, partition = reply
    return Lease(
        decode(item_id), bytes(payload), decode(token), int(timeouts), int(nacks), decode(partition)
    )


def _lease_one(reply: Any) -> Lease | None:
    return None if reply is None else _lease(reply)


def _lease_many(reply: Any) -> list[Lease]:
    return [] if reply is None else [_lease(entry) for entry in reply]


def _lease_args(name: str, lease_ms: int, block_ms: int | None) -> tuple[Arg, ...]:
    """`VTRR.LEASE` with what every `Lease` holds: the nack count, the partition."""
    args: tuple[Arg, ...] = ("VTRR.LEASE", name, lease_ms, "WITHCOUNTERS", "WITHPARTITION")
    if block_ms is not None:
        args += ("BLOCK", block_ms)
    return args


def lease(name: str, lease_ms: int, block_ms: int | None = None) -> Command[Lease | None]:
    return Command(_lease_args(name, lease_ms, block_ms), _lease_one)


def lease_many(
    name: str, lease_ms: int, count: int, block_ms: int | None = None
) -> Command[list[Lease]]:
    return Command((*_lease_args(name, lease_ms, block_ms), "COUNT", count), _lease_many)


def _pairs(leases: Iterable[tuple[str, str]]) -> list[Arg]:
    pairs: list[Arg] = []
    for item_id, token in leases:
        pairs += [encode(item_id), token]
    if not pairs:
        raise ValueError("ack needs at least one lease")
    return pairs


def _acks(leases: Iterable[tuple[str, str]], costs: Sequence[int] | None) -> list[Arg]:
    """`<id> <token> ...` pairs, or `<id> <token> <cost> ...` triples with `costs`."""
    if costs is None:
        return _pairs(leases)
    leases = list(leases)
    if len(costs) != len(leases):
        raise ValueError(f"{len(costs)} costs for {len(leases)} leases: one cost per lease")
    triples: list[Arg] = []
    for (item_id, token), cost in zip(leases, costs, strict=True):
        check_int("cost", cost, 0, MAX_COST)
        triples += [encode(item_id), token, cost]
    if not triples:
        raise ValueError("ack needs at least one lease")
    return triples


def ack(
    name: str, leases: Iterable[tuple[str, str]], costs: Sequence[int] | None = None
) -> Command[int]:
    """`VTRR.ACK`, or `VTRR.ACKCOST` charging each lease's cost (one per lease)."""
    command = "VTRR.ACK" if costs is None else "VTRR.ACKCOST"
    return Command((command, name, *_acks(leases, costs)), _int)


def _acked_leases(reply: Any) -> AckedLeases:
    acked, leases = reply
    return AckedLeases(tuple(int(took) == 1 for took in acked), _lease_many(leases))


def ack_and_lease(
    name: str,
    leases: Iterable[tuple[str, str]],
    lease_ms: int,
    count: int,
    block_ms: int | None = None,
    costs: Sequence[int] | None = None,
) -> Command[AckedLeases]:
    """`VTRR.LEASE ... ACK` (`ACKCOST` with `costs`): the acks at once, then up
    to `count` leases."""
    option = "ACK" if costs is None else "ACKCOST"
    acks = _acks(leases, costs)
    return Command(
        (*_lease_args(name, lease_ms, block_ms), "COUNT", count, option, *acks),
        _acked_leases,
    )


def renew(
    name: str, item_id: str, token: str, lease_ms: int, cost: int | None = None
) -> Command[bool]:
    """`VTRR.RENEW`; with `cost`, `COST`: what the job cost since its last report."""
    args: tuple[Arg, ...] = ("VTRR.RENEW", name, encode(item_id), token, lease_ms)
    if cost is not None:
        args += ("COST", check_int("cost", cost, 0, MAX_COST))
    return Command(args, _bool)


def _nack_outcome(reply: Any) -> NackOutcome | None:
    return None if reply is None else NackOutcome(decode(reply))


def nack(
    name: str,
    item_id: str,
    token: str,
    delay_ms: int | None = None,
    dead: bool = False,
    release: bool = False,
    reason: str | bytes | None = None,
) -> Command[NackOutcome | None]:
    """`VTRR.NACK ... WITHSTATE`; `reason` (`REASON`): what failed, kept with the item."""
    args: tuple[Arg, ...] = ("VTRR.NACK", name, encode(item_id), token)
    if delay_ms is not None:
        args += ("DELAY", delay_ms)
    if dead:
        args += ("DEAD",)
    if release:
        args += ("RELEASE",)
    if reason is not None:
        args += ("REASON", check_reason(reason))
    return Command((*args, "WITHSTATE"), _nack_outcome)


def reclaim(name: str, limit: int | None = None) -> Command[int]:
    args: tuple[Arg, ...] = ("VTRR.RECLAIM", name)
    if limit is not None:
        args += ("LIMIT", limit)
    return Command(args, _int)


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
        paused_partitions=int(f["paused-partitions"]),
        capped_partitions=int(f["capped-partitions"]),
        current_virtual_time=int(f["current-virtual-time"]),
        next_due_ms=_opt_int(f["next-due-ms"]),
        next_expiry_ms=_opt_int(f["next-expiry-ms"]),
        layout=cast(Layout, decode(f["layout"])),
        oldest_waiting_ms=_opt_int(f["oldest-waiting-ms"]),
        totals=_totals(f),
    )


def stats(name: str) -> Command[Stats]:
    return Command(("VTRR.STATS", name), _stats)


def check(name: str) -> Command[list[str]]:
    return Command(("VTRR.CHECK", name), lambda reply: [decode(p) for p in reply])


Limit = int | Literal["NONE"] | None


def _limit_arg(option: str, value: Limit) -> tuple[Arg, ...]:
    return () if value is None else (option, value)


def _policy(reply: Any) -> Policy:
    f = _fields(reply)
    return Policy(
        max_timeouts=_opt_int(f["max-timeouts"]),
        max_nacks=_opt_int(f["max-nacks"]),
        default_concurrency=_opt_int(f["default-concurrency"]),
        default_rate=_rate(f, prefix="default-"),
    )


def get_policy(name: str) -> Command[Policy]:
    return Command(("VTRR.POLICY", name), _policy)


def set_policy(
    name: str,
    max_timeouts: Limit,
    max_nacks: Limit,
    default_concurrency: Limit,
    default_rate: Rate | Literal["NONE"] | None = None,
) -> Command[None]:
    options = (
        *_limit_arg("MAX-TIMEOUTS", max_timeouts),
        *_limit_arg("MAX-NACKS", max_nacks),
        *_limit_arg("DEFAULT-CONCURRENCY", default_concurrency),
        *_rate_args(default_rate, "DEFAULT-RATE"),
    )
    if not options:
        raise ValueError("set_policy needs at least one setting (None leaves one unchanged)")
    return Command(("VTRR.POLICY", name, *options), _ok)


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


def dead(name: str, count: int = 10) -> Command[list[DeadItem]]:
    return Command(("VTRR.DEAD", name, "COUNT", count), _dead)


def _ids(command: str, name: str, ids: Iterable[str]) -> Command[int]:
    encoded = [encode(item_id) for item_id in ids]
    if not encoded:
        raise ValueError(f"{command.split('.')[1].lower()} needs at least one id")
    return Command((command, name, *encoded), _int)


def revive(name: str, ids: Iterable[str]) -> Command[int]:
    return _ids("VTRR.REVIVE", name, ids)


def cancel(name: str, ids: Iterable[str]) -> Command[int]:
    return _ids("VTRR.CANCEL", name, ids)


def _rate(f: Mapping[str, Any], prefix: str = "", suffix: str = "") -> Rate | None:
    amount = f.get(f"{prefix}rate{suffix}")
    if amount is None:  # none, or a module from before the field
        return None
    per_ms, burst = f[f"{prefix}per-ms{suffix}"], f[f"{prefix}burst{suffix}"]
    return Rate(amount=int(amount), per_ms=int(per_ms), burst=int(burst))


def _settings(reply: Any) -> PartitionSettings:
    f = _fields(reply)
    return PartitionSettings(
        concurrency=_opt_int(f["concurrency"]),
        paused=int(f["paused"]) == 1,
        share=int(f["share"]),
        rate=_rate(f),
    )


def get_limit(name: str, partition: str) -> Command[PartitionSettings]:
    return Command(("VTRR.LIMIT", name, encode(partition)), _settings)


def _rate_args(rate: Rate | Literal["NONE"] | None, option: str = "RATE") -> tuple[Arg, ...]:
    if rate is None:
        return ()
    if rate == "NONE":
        return (option, "NONE")
    burst = () if rate.burst is None else ("BURST", rate.burst)
    return (option, rate.amount, "PER", rate.per_ms, *burst)


def set_limit(
    name: str,
    partition: str,
    concurrency: Limit,
    share: int | None,
    rate: Rate | Literal["NONE"] | None = None,
) -> Command[None]:
    options = (
        *_limit_arg("CONCURRENCY", concurrency),
        *_limit_arg("SHARE", share),
        *_rate_args(rate),
    )
    if not options:
        raise ValueError("set_limit needs concurrency, share or rate")
    return Command(("VTRR.LIMIT", name, encode(partition), *options), _ok)


def pause(name: str, partition: str) -> Command[bool]:
    return Command(("VTRR.PAUSE", name, encode(partition)), _bool)


def resume(name: str, partition: str) -> Command[bool]:
    return Command(("VTRR.RESUME", name, encode(partition)), _bool)


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
    )


def _page(reply: Any) -> tuple[int, list[PartitionView]]:
    cursor, entries = reply
    return int(cursor), [_view(entry) for entry in entries]


def partitions_page(
    name: str, cursor: int = 0, count: int | None = None
) -> Command[tuple[int, list[PartitionView]]]:
    args: tuple[Arg, ...] = ("VTRR.PARTITIONS", name, "CURSOR", cursor)
    if count is not None:
        args += ("COUNT", count)
    return Command(args, _page)


def partitions_top(
    name: str, count: int, by: Rank, offset: int = 0
) -> Command[tuple[int, list[PartitionView]]]:
    """VTRR.PARTITIONS ... TOP: (how many partitions the ranking holds, the page)."""
    args: tuple[Arg, ...] = ("VTRR.PARTITIONS", name, "TOP", count, "BY", by.upper())
    if offset:
        args += ("OFFSET", offset)
    return Command(args, _page)


def partition(name: str, partition: str) -> Command[PartitionView]:
    return Command(
        ("VTRR.PARTITIONS", name, "PARTITION", encode(partition)),
        lambda reply: _page(reply)[1][0],
    )


def schedule(
    name: str,
    schedule: str,
    *,
    every_ms: int | None,
    cron: str | None,
    tz: str | None,
    partition: str,
    payload: bytes | str,
    weight: int,
    missed: Missed,
) -> Command[int]:
    """`VTRR.SCHEDULE`: exactly one of `every_ms` and `cron` (checked here, as the server does)."""
    timing: tuple[Arg, ...]
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
        ("VTRR.SCHEDULE", name, encode(schedule), *timing, *options, "MISSED", missed), _int
    )


def unschedule(name: str, schedules: Iterable[str]) -> Command[int]:
    encoded = [encode(schedule) for schedule in schedules]
    if not encoded:
        raise ValueError("unschedule needs at least one schedule")
    return Command(("VTRR.UNSCHEDULE", name, *encoded), _int)


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


def schedule_view(name: str, schedule: str, runs: int = 1) -> Command[ScheduleView | None]:
    return Command(
        ("VTRR.SCHEDULES", name, "SCHEDULE", encode(schedule), "RUNS", runs),
        lambda reply: None if reply is None else _schedule(reply),
    )


def _schedules_page(reply: Any) -> tuple[int, list[ScheduleView]]:
    cursor, entries = reply
    return int(cursor), [_schedule(entry) for entry in entries]


def schedules_page(
    name: str, cursor: int = 0, count: int | None = None, runs: int = 1
) -> Command[tuple[int, list[ScheduleView]]]:
    args: tuple[Arg, ...] = ("VTRR.SCHEDULES", name, "CURSOR", cursor)
    if count is not None:
        args += ("COUNT", count)
    return Command((*args, "RUNS", runs), _schedules_page)


def recount(name: str) -> Command[int]:
    return Command(("VTRR.RECOUNT", name), _int)


def convert(name: str, layout: Layout) -> Command[bool]:
    return Command(("VTRR.CONVERT", name, layout.upper()), _bool)


def inspect(name: str, key: str) -> Command[Any]:
    return Command(("VTRR.INSPECT", name, key), lambda reply: reply)
