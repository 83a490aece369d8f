"""One round trip of a worker: settle what finished, renew what runs, lease what fits.

A worker's dispatcher sends an `Exchange` and reads an `Exchanged`: its
NACKs (`WITHSTATE`) and RENEWs pipelined, then one `VTRR.LEASE ... COUNT n
ACK ...` (`ACKCOST ...` when it reports costs, `ACKRESULT ...` when its
jobs returned results) that finishes the succeeded leases and leases the
next items. The
commands and how their replies combine are here, once; `Queue`,
`AsyncQueue` and `ShardedQueue` only send them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import commands
from .commands import Command
from .types import AckedLeases, Fenced, Lease, NackOutcome


@dataclasses.dataclass(frozen=True, slots=True)
class GiveBack:
    """A lease to NACK: after `delay_ms`, dead, or released uncounted (shutdown);
    `reason`: what failed (`REASON`)."""

    lease: Fenced
    delay_ms: int | None = None
    dead: bool = False
    release: bool = False
    reason: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    """What one round trip asks: leases to ACK, NACK and RENEW, and `count` new leases."""

    lease_ms: int
    acks: tuple[Fenced, ...] = ()
    nacks: tuple[GiveBack, ...] = ()
    renews: tuple[Fenced, ...] = ()
    count: int = 0
    block_ms: int | None = None
    """Wait for an item up to this long (0: forever), only when it leases."""
    costs: tuple[int, ...] | None = None
    """What each ACK's job cost since its last report (one per ack), charged
    in place of its weight."""
    renew_costs: tuple[int, ...] | None = None
    """What each renewed job cost since its last report (one per renewal)."""
    results: tuple[bytes | None, ...] | None = None
    """What each ACK's job returned (one per ack, None for one that returned
    nothing), kept as its result (`VTRR.ACKRESULT`); None when none did. An
    ack with a result reports no cost: ACKRESULT takes none."""

    def __post_init__(self) -> None:
        if self.costs is not None and len(self.costs) != len(self.acks):
            raise ValueError(f"{len(self.costs)} costs for {len(self.acks)} acks")
        if self.renew_costs is not None and len(self.renew_costs) != len(self.renews):
            raise ValueError(f"{len(self.renew_costs)} costs for {len(self.renews)} renewals")
        if self.results is not None and len(self.results) != len(self.acks):
            raise ValueError(f"{len(self.results)} results for {len(self.acks)} acks")

    def renew_costs_each(self) -> list[int | None]:
        """Each renewal's cost argument."""
        if self.renew_costs is None:
            return [None] * len(self.renews)
        return list(self.renew_costs)

    def is_empty(self) -> bool:
        return not (self.acks or self.nacks or self.renews or self.count)

    def _result(self, i: int) -> bytes | None:
        return None if self.results is None else self.results[i]

    def placed(self) -> tuple[list[int], list[int]]:
        """The acks sent alone (an ACK each, whose count says whether it took)
        and those the LEASE carries, as indexes into `acks`. A LEASE carries
        one form (ACK, ACKCOST or ACKRESULT): every ack when they share one;
        else those without a result, and the others go alone."""
        every = list(range(len(self.acks)))
        if not self.count:
            return every, []
        with_result = [i for i in every if self._result(i) is not None]
        if len(with_result) in (0, len(every)):
            return [], every
        return with_result, [i for i in every if self._result(i) is None]

    def ack_options(self, indexes: list[int]) -> tuple[list[int] | None, list[bytes] | None]:
        """The `costs` and `results` of one ACK of the acks at `indexes` (as
        `placed` groups them: all with a result, or none)."""
        results = [r for i in indexes if (r := self._result(i)) is not None]
        if results:
            return None, results
        return (None if self.costs is None else [self.costs[i] for i in indexes]), None


@dataclasses.dataclass(frozen=True, slots=True)
class Exchanged:
    """What came back, in the order asked."""

    acked: tuple[bool, ...]
    nacked: tuple[NackOutcome | None, ...]
    """Where each NACK sent its item; None when its lease was no longer current."""
    renewed: tuple[bool | None, ...]
    """False when a lease is lost; None when it could not be asked (a sharded
    queue's sub-queue out of reach): the lease may still stand, and the next
    renewal asks again."""
    leases: list[Lease]


def commands_of(name: str, exchange: Exchange) -> list[Command[Any]]:
    """The commands of `exchange`, in the order `read` expects their replies."""
    sent: list[Command[Any]] = [
        commands.give_back(
            name,
            give.lease,
            delay_ms=give.delay_ms,
            dead=give.dead,
            release=give.release,
            reason=give.reason,
        )
        for give in exchange.nacks
    ]
    sent += [
        commands.renew(name, lease, exchange.lease_ms, cost=cost)
        for lease, cost in zip(exchange.renews, exchange.renew_costs_each(), strict=True)
    ]
    alone, carried = exchange.placed()
    for i in alone:
        costs, results = exchange.ack_options([i])
        sent.append(commands.ack(name, exchange.acks[i], costs=costs, results=results))
    if carried:
        costs, results = exchange.ack_options(carried)
        sent.append(
            commands.ack_and_lease(
                name,
                [exchange.acks[i] for i in carried],
                exchange.lease_ms,
                exchange.count,
                block_ms=exchange.block_ms,
                costs=costs,
                results=results,
            )
        )
    elif exchange.count:
        sent.append(
            commands.lease_many(name, exchange.lease_ms, exchange.count, block_ms=exchange.block_ms)
        )
    return sent


def read(exchange: Exchange, values: list[Any]) -> Exchanged:
    """The parsed replies of `commands_of(exchange)` as one `Exchanged`."""
    nacks, renews = len(exchange.nacks), len(exchange.renews)
    nacked = tuple(values[:nacks])
    renewed = tuple(bool(value) for value in values[nacks : nacks + renews])
    rest = values[nacks + renews :]
    alone, carried = exchange.placed()
    acked = [False] * len(exchange.acks)
    for i, count in zip(alone, rest, strict=False):
        acked[i] = count == 1
    leases: list[Lease] = []
    if carried:
        got: AckedLeases = rest[len(alone)]
        for i, took in zip(carried, got.acked, strict=True):
            acked[i] = took
        leases = got.leases
    elif exchange.count:
        leases = rest[len(alone)]
    return Exchanged(tuple(acked), nacked, renewed, leases)
