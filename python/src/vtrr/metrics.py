"""Prometheus metrics of vtrr queues, read from the server at each scrape.

`QueueCollector` keeps nothing between scrapes: each scrape reads every
queue's `VTRR.STATS` and two bounded rankings of its partitions
(`VTRR.PARTITIONS ... TOP`), so what Prometheus gets is the server's
state, however many exporters or web apps read it. Per-tenant series are
kept to the `top_k` worst tenants plus one `partition="other"` series
holding the rest: a queue of 100,000 partitions still makes at most
`top_k + 1` series per metric and state. Every metric is listed in
docs/operations.md (Metrics).

    registry = registry_for(QueueCollector(redis.Redis(), ["files"], top_k=20))
    prometheus_client.start_http_server(9808, registry=registry)

Needs the `exporter` (or `web`) extra: `pip install 'vtrr[exporter]'`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Generator, Iterator, Sequence
from typing import Any, cast

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from .client import QUEUE_KEY_SUFFIXES, Queue
from .types import PartitionView, Stats, Totals, decode

logger = logging.getLogger("vtrr.metrics")

# Each item in one state: `ready` and `held` together are what every other view
# (STATS, the CLI, vtrr top, the web view) calls `queued`.
STATES = ("ready", "held", "leased", "delayed", "dead")
OTHER = "other"
"""The `partition` label of the series holding every tenant not in the top."""

# Discovery reads at most this many SCAN steps of this many keys per node,
# and lists at most this many queues: a scrape stays bounded on any keyspace.
_SCAN_STEPS = 100
_SCAN_COUNT = 1000
_MAX_DISCOVERED = 1000
_SCAN = "the scan for queues (SCAN vtrr:*)"
# Any key of a queue names it: in the keys layout a drained queue has no
# `queue` key left, but keeps others.
_QUEUE_KEY_SUFFIXES = frozenset(QUEUE_KEY_SUFFIXES)
_TOTALS = tuple(field.name for field in dataclasses.fields(Totals))
_TOTALS_HELP = {
    "enqueued": "Items accepted by ENQUEUE or DEFER.",
    "leased": "Leases handed out (an item leased again after an expiry or a nack counts again).",
    "acked": "Items acknowledged as done.",
    "nacked": "Leases given back by a NACK (not by NACK ... RELEASE).",
    "dead": "Items dead-lettered, whichever way.",
    "expired": "Leases that ran out before their item was settled.",
}


def _label(name: str) -> str:
    """A name as a label value, one to one (distinct names make distinct series): a
    backslash doubled, a byte that is not UTF-8 as `\\xNN`, an unprintable character (CR,
    NUL, ...) as `\\uNNNN` (`\\UNNNNNNNN` past U+FFFF). A single backslash always starts
    an escape: the text `\\xff` becomes `\\\\xff`, the byte 0xFF `\\xff`."""
    if name.isprintable() and "\\" not in name:
        return name
    out = []
    for char in name:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as the client decodes it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def _seconds(ms: int | None) -> float:
    return 0.0 if ms is None else ms / 1000


def _by_state(counts: Stats | PartitionView) -> dict[str, int]:
    """Items by state, each item in one: `ready` is what waits and may be leased
    now, `held` what waits behind a pause or a cap (`queued` everywhere counts both)."""
    leased = counts.inflight if isinstance(counts, Stats) else counts.leased
    return {
        "ready": counts.queued - counts.held,
        "held": counts.held,
        "leased": leased,
        "delayed": counts.delayed,
        "dead": counts.dead,
    }


def _top_tenants(
    by_queued: Sequence[PartitionView], by_oldest: Sequence[PartitionView], count: int
) -> list[PartitionView]:
    """At most `count` tenants from two rankings, taken in turn (the most queued, the
    longest waiting, the second most queued, ...): the worst of both, never more than
    `count`. A tenant named `other` is left to the `other` series, which would clash."""
    chosen: dict[str, PartitionView] = {}
    for pair in itertools.zip_longest(by_queued, by_oldest):
        for view in pair:
            if len(chosen) < count and view is not None and view.partition != OTHER:
                chosen.setdefault(view.partition, view)
    return list(chosen.values())


@dataclasses.dataclass(frozen=True, slots=True)
class _QueueReading:
    """What one scrape read of one queue."""

    name: str
    stats: Stats
    tenants: list[PartitionView]


class _Families:
    """The metric families of one scrape, filled queue by queue."""

    def __init__(self, per_tenant: bool) -> None:
        self.per_tenant = per_tenant
        self.items = GaugeMetricFamily(
            "vtrr_queue_items", "Items in the queue by state.", labels=["queue", "state"]
        )
        self.oldest = GaugeMetricFamily(
            "vtrr_queue_oldest_waiting_seconds",
            "How long the longest-waiting partition's line has gone unserved (0: nothing queued).",
            labels=["queue"],
        )
        self.totals = {
            field: CounterMetricFamily(f"vtrr_queue_{field}", _TOTALS_HELP[field], labels=["queue"])
            for field in _TOTALS
        }
        self.expired = GaugeMetricFamily(
            "vtrr_queue_leases_expired",
            "Leases past their expiry not yet taken back (counted in the leased items too).",
            labels=["queue"],
        )
        self.partitions = GaugeMetricFamily(
            "vtrr_queue_partitions", "Partitions with items or settings.", labels=["queue"]
        )
        self.paused = GaugeMetricFamily(
            "vtrr_queue_partitions_paused", "Paused partitions.", labels=["queue"]
        )
        self.capped = GaugeMetricFamily(
            "vtrr_queue_partitions_capped",
            "Partitions with a concurrency cap of their own.",
            labels=["queue"],
        )
        self.tenant_items = GaugeMetricFamily(
            "vtrr_partition_items",
            'Items of the top tenants by state; partition="other" holds every other tenant\'s.',
            labels=["queue", "partition", "state"],
        )
        self.tenant_waiting = GaugeMetricFamily(
            "vtrr_partition_waiting_seconds",
            "How long each top tenant's line has gone unserved (only tenants with items queued).",
            labels=["queue", "partition"],
        )
        self.error = GaugeMetricFamily(
            "vtrr_scrape_error",
            "1 when this scrape could not read the queue (its other series are then absent).",
            labels=["queue"],
        )

    def add(self, reading: _QueueReading) -> None:
        queue, stats = _label(reading.name), reading.stats
        self.error.add_metric([queue], 0)
        for state, count in _by_state(stats).items():
            self.items.add_metric([queue, state], count)
        self.oldest.add_metric([queue], _seconds(stats.oldest_waiting_ms))
        for field, family in self.totals.items():
            family.add_metric([queue], getattr(stats.totals, field))
        self.expired.add_metric([queue], stats.expired)
        self.partitions.add_metric([queue], stats.partitions)
        self.paused.add_metric([queue], stats.paused_partitions)
        self.capped.add_metric([queue], stats.capped_partitions)
        if not self.per_tenant:
            return
        rest = _by_state(stats)
        for view in reading.tenants:
            tenant = _label(view.partition)
            for state, count in _by_state(view).items():
                self.tenant_items.add_metric([queue, tenant, state], count)
                rest[state] -= count
            if view.waiting_ms is not None:
                self.tenant_waiting.add_metric([queue, tenant], _seconds(view.waiting_ms))
        for state, count in rest.items():
            # The rankings are read after the stats: a count that moved meanwhile
            # must not make the rest negative.
            self.tenant_items.add_metric([queue, OTHER, state], max(0, count))

    def failed(self, name: str) -> None:
        self.error.add_metric([_label(name)], 1)

    def all(self) -> list[Metric]:
        return [
            self.items, self.oldest, *self.totals.values(), self.expired, self.partitions,
            self.paused, self.capped, self.tenant_items, self.tenant_waiting, self.error,
        ]  # fmt: skip


class QueueCollector:
    """A Prometheus collector of vtrr queues, read at each scrape.

    `queues` empty: every queue found by a bounded SCAN of `vtrr:*` (on
    every primary of a cluster), at each scrape. `top_k`: how many tenants
    per queue get series of their own (0: none, and no `other` series).
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        queues: Sequence[str],
        *,
        top_k: int = 20,
    ) -> None:
        if top_k < 0:
            raise ValueError("top_k must not be negative")
        self.client = client
        self.queues = tuple(queues)
        self.top_k = top_k
        # What the last scrape could not read, and why: for logging a
        # problem once, not at every scrape.
        self._problems: dict[str, str] = {}
        self._problems_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"QueueCollector({list(self.queues) or 'discovered'}, top_k={self.top_k})"

    def collect(self) -> Iterator[Metric]:
        problems: dict[str, str] = {}  # what this scrape could not read, and why
        names: Sequence[str] = self.queues
        if not self.queues:
            names = yield from self._discovered(problems)
        families = _Families(per_tenant=self.top_k > 0)
        for name in names:
            try:
                reading = self._read(name)
            except Exception as error:  # one queue's failure must not cost the others theirs
                families.failed(name)
                problems[name] = f"cannot be read: {type(error).__name__}: {error}"
            else:
                families.add(reading)
        self._log_changes(problems)
        yield from families.all()

    def _discovered(self, problems: dict[str, str]) -> Generator[Metric, None, list[str]]:
        """Yield the discovery's own gauges; return the queues it found, sorted."""
        failed = GaugeMetricFamily(
            "vtrr_discovery_error", "1 when the scan for queues failed (no queue is listed)."
        )
        truncated = GaugeMetricFamily(
            "vtrr_discovery_truncated",
            "1 when the scan for queues stopped at its bound: some queues may be missing.",
        )
        try:
            found, complete = self._discover()
        except Exception as error:
            problems[_SCAN] = f"failed: {type(error).__name__}: {error}"
            found, complete = set(), True
            failed.add_metric([], 1)
        else:
            failed.add_metric([], 0)
        if not complete:
            problems[_SCAN] = (
                f"stopped at its bound ({_SCAN_STEPS} steps of {_SCAN_COUNT} keys per node,"
                f" {_MAX_DISCOVERED} queues): some queues are not exported"
            )
        truncated.add_metric([], 0 if complete else 1)
        yield failed
        yield truncated
        return sorted(found)

    def _read(self, name: str) -> _QueueReading:
        # retry_seconds 0: a scrape reports a moving slot rather than wait it out.
        queue = Queue(self.client, name, retry_seconds=0)
        stats = queue.stats()
        tenants: list[PartitionView] = []
        if self.top_k:
            _, by_queued = queue.partitions_top(self.top_k, "queued")
            _, by_oldest = queue.partitions_top(self.top_k, "oldest")
            tenants = _top_tenants(by_queued, by_oldest, self.top_k)
        return _QueueReading(name, stats, tenants)

    def _discover(self) -> tuple[set[str], bool]:
        """The names of the queues found, and whether the scan ran to its end."""
        if isinstance(self.client, redis.RedisCluster):
            cluster = cast(Any, self.client)  # get_primaries is not annotated
            nodes = [cluster.get_redis_connection(node) for node in cluster.get_primaries()]
        else:
            nodes = [self.client]
        names: set[str] = set()
        for node in nodes:
            cursor = 0
            for _ in range(_SCAN_STEPS):
                cursor, keys = node.scan(cursor, match="vtrr:*", count=_SCAN_COUNT)
                for key in keys:
                    name, _, suffix = decode(key).removeprefix("vtrr:").rpartition(":")
                    if name and suffix in _QUEUE_KEY_SUFFIXES:
                        names.add(name)
                if len(names) >= _MAX_DISCOVERED:
                    return set(sorted(names)[:_MAX_DISCOVERED]), False
                if cursor == 0:
                    break
            else:
                return names, False
        return names, True

    def _log_changes(self, problems: dict[str, str]) -> None:
        """Log a problem when it starts or changes, and once when it is over."""
        with self._problems_lock:
            before, self._problems = self._problems, problems
        for what, problem in problems.items():
            if before.get(what) != problem:
                logger.warning("%s: %s", what, problem)
        for what in before.keys() - problems.keys():
            logger.warning("%s: no longer failing", what)


def registry_for(collector: QueueCollector) -> CollectorRegistry:
    """A registry holding only `collector` (no process or platform metrics)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return registry
