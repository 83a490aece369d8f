"""`vtrr exporter` (vtrr.metrics) as Prometheus sees it: a real exporter process, scraped over HTTP.

One server and one exporter discovering every queue serve the module; a
wrong-type key at `vtrr:bad:queue` is there from the start, so every scrape
here also shows that one broken queue costs the others nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from servers import Server, free_port

import vtrr
from vtrr import Item
from vtrr.metrics import STATES

VTRR = str(Path(sys.executable).parent / "vtrr")
TOP_K = 5
LEASE_MS = 60_000


class Exporter:
    """`vtrr exporter` on a free port, stopped by `stop`."""

    def __init__(self, url: str, *args: str, log: Path) -> None:
        self.port = free_port()
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [VTRR, "exporter", "--url", url, "--host", "127.0.0.1",
             "--port", str(self.port), "--top-k", str(TOP_K), *args],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.log = log
        deadline = time.monotonic() + 60
        while True:
            try:
                self.scrape()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the exporter did not start:\n{log.read_text()}") from None
                time.sleep(0.05)

    def text(self) -> str:
        """One scrape, as the exposition text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:
            text: str = reply.read().decode()
        return text

    def scrape(self) -> list[Sample]:
        """One scrape, parsed by prometheus_client's text parser."""
        return [
            sample
            for family in text_string_to_metric_families(self.text())
            for sample in family.samples
        ]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self._log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Exporter]]:
    """A server of its own (discovery sees only this module's queues) and an exporter of all."""
    server = Server(("reclaim-interval-ms", "50"))
    server.client().set("vtrr:bad:queue", "not a queue")
    exporter = None
    try:
        exporter = Exporter(server.url, log=tmp_path_factory.mktemp("exporter") / "log")
        yield server, exporter
    finally:
        if exporter is not None:
            exporter.stop()
        server.stop()


@pytest.fixture
def fresh_queue(served: tuple[Server, Exporter]) -> Iterator[vtrr.Queue]:
    client = served[0].client()
    yield vtrr.Queue(client, "{m" + uuid.uuid4().hex[:10] + "}")
    client.close()


def of(samples: list[Sample], name: str, **labels: str) -> dict[tuple[str, ...], float]:
    """The values of `name` whose labels include `labels`, by the rest of their label values."""
    return {
        tuple(v for k, v in sorted(s.labels.items()) if k not in labels): s.value
        for s in samples
        if s.name == name and labels.items() <= s.labels.items()
    }


def one(samples: list[Sample], name: str, **labels: str) -> float:
    [value] = of(samples, name, **labels).values()
    return value


def by_state(counts: vtrr.Stats | vtrr.PartitionView) -> dict[tuple[str, ...], float]:
    leased = counts.inflight if isinstance(counts, vtrr.Stats) else counts.leased
    values = {
        "ready": counts.queued - counts.held, "held": counts.held, "leased": leased,
        "delayed": counts.delayed, "dead": counts.dead,
    }  # fmt: skip
    return {(state,): float(count) for state, count in values.items()}


def test_a_queue_as_the_exporter_reports_it(
    served: tuple[Server, Exporter], fresh_queue: vtrr.Queue
) -> None:
    queue, exporter = fresh_queue, served[1]
    queue.enqueue_many(
        [Item("alice", f"a{i}", b"") for i in range(3)]
        + [Item("bob", "b0", b""), Item("bob", "b1", b""), Item("carol", "c0", b"")]
    )
    queue.defer(LEASE_MS, [Item("dave", "d0", b"")])
    queue.pause("carol")
    first, _still_leased = queue.lease_many(LEASE_MS, 2)
    assert queue.nack(first, dead=True) == vtrr.NackOutcome.DEAD
    before = queue.stats()
    samples = exporter.scrape()
    after = queue.stats()
    assert (after.inflight, after.delayed, after.dead, after.paused_partitions) == (1, 1, 1, 1)
    assert after.totals == before.totals, "the queue stood still while it was scraped"

    name = queue.name
    assert of(samples, "vtrr_queue_items", queue=name) == by_state(after)
    waited = one(samples, "vtrr_queue_oldest_waiting_seconds", queue=name)
    assert before.oldest_waiting_ms is not None and after.oldest_waiting_ms is not None
    assert before.oldest_waiting_ms / 1000 <= waited <= after.oldest_waiting_ms / 1000
    for field in ("enqueued", "leased", "acked", "nacked", "dead", "expired"):
        assert one(samples, f"vtrr_queue_{field}_total", queue=name) == getattr(
            after.totals, field
        ), field
    assert one(samples, "vtrr_queue_leases_expired", queue=name) == after.expired == 0
    assert one(samples, "vtrr_queue_partitions", queue=name) == after.partitions
    assert one(samples, "vtrr_queue_partitions_paused", queue=name) == 1
    assert one(samples, "vtrr_queue_partitions_capped", queue=name) == after.capped_partitions
    assert one(samples, "vtrr_scrape_error", queue=name) == 0

    # Per tenant: each shown one's own counts, and `other` the rest of the queue's.
    tenants = of(samples, "vtrr_partition_items", queue=name)
    shown = {partition for partition, _ in tenants} - {"other"}
    assert {"alice", "bob", "carol"} <= shown and len(shown) <= TOP_K
    for partition in shown:
        assert of(samples, "vtrr_partition_items", queue=name, partition=partition) == by_state(
            queue.partition(partition)
        ), partition
    for state in STATES:
        total = sum(of(samples, "vtrr_partition_items", queue=name, state=state).values())
        assert total == by_state(after)[(state,)], state
    waiting = of(samples, "vtrr_partition_waiting_seconds", queue=name)
    assert ("alice",) in waiting and ("other",) not in waiting
    assert max(waiting.values()) <= waited + 1


def test_a_thousand_partitions_make_at_most_top_k_plus_one_series(
    served: tuple[Server, Exporter], fresh_queue: vtrr.Queue
) -> None:
    queue, exporter = fresh_queue, served[1]
    queue.enqueue_many([Item(f"tenant-{t}", f"i{t}", b"") for t in range(1000)])
    queue.enqueue_many([Item("big", f"big{i}", b"") for i in range(10)])
    samples = exporter.scrape()
    name = queue.name
    for state in STATES:
        series = of(samples, "vtrr_partition_items", queue=name, state=state)
        assert len(series) <= TOP_K + 1, (state, sorted(series))
        assert ("other",) in series and sum(series.values()) == by_state(queue.stats())[(state,)]
    assert ("big",) in of(samples, "vtrr_partition_items", queue=name, state="ready")
    assert len(of(samples, "vtrr_partition_waiting_seconds", queue=name)) <= TOP_K
    # The longest-waiting tenants have their series too: the first enqueued.
    assert ("tenant-0",) in of(samples, "vtrr_partition_waiting_seconds", queue=name)


def test_a_broken_queue_sets_its_error_and_the_others_still_export(
    served: tuple[Server, Exporter], fresh_queue: vtrr.Queue, tmp_path: Path
) -> None:
    server, exporter = served
    # A queue with only a dead item: in the keys layout its `queue` key is
    # gone, so discovery must find it by its other keys.
    queue = fresh_queue
    queue.enqueue("alice", "a0", b"")
    leased = queue.lease(LEASE_MS)
    assert leased is not None and queue.nack(leased, dead=True)
    samples = exporter.scrape()
    assert one(samples, "vtrr_scrape_error", queue="bad") == 1
    assert of(samples, "vtrr_queue_items", queue="bad") == {}, "no half-read series"
    assert one(samples, "vtrr_scrape_error", queue=queue.name) == 0
    assert one(samples, "vtrr_queue_items", queue=queue.name, state="dead") == 1
    assert one(samples, "vtrr_discovery_error") == 0
    assert one(samples, "vtrr_discovery_truncated") == 0
    assert "bad: cannot be read: WrongType" in exporter.log.read_text(), "said once, in the log"

    # Queues named on the command line: those only, and no discovery gauges.
    named = Exporter(server.url, queue.name, log=tmp_path / "named.log")
    try:
        samples = named.scrape()
    finally:
        named.stop()
    assert {s.labels.get("queue") for s in samples} == {queue.name}
    assert of(samples, "vtrr_discovery_error") == {}


def test_an_unreachable_server_is_an_error_not_a_failed_scrape(tmp_path: Path) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    named = Exporter(nobody, "files", log=tmp_path / "named.log")
    discovering = Exporter(nobody, log=tmp_path / "discovering.log")
    try:
        assert one(named.scrape(), "vtrr_scrape_error", queue="files") == 1
        assert one(discovering.scrape(), "vtrr_discovery_error") == 1
    finally:
        named.stop()
        discovering.stop()
    assert "cannot be read: ConnectionError" in (tmp_path / "named.log").read_text()


# Partition names whose labels must stay apart, each with the label value it gets: the byte
# 0xFF and the text `\xff`, the byte 0x85 and the character U+0085, control characters
# (raw in an exposition they break its lines), backslashes. (Pairs, not a dict: ruff
# takes two of these surrogates for the same key.)
ODD_PARTITIONS = [
    ("\udcff", r"\xff"),
    ("\\xff", r"\\xff"),
    ("\udc85", r"\x85"),
    ("\x85", r"\u0085"),
    ("cr\rhere", r"cr\u000dhere"),
    ("nul\x00here", r"nul\u0000here"),
    ("new\nline", r"new\u000aline"),
    ("back\\slash", r"back\\slash"),
    ("plain", "plain"),
]


def test_odd_partition_names_are_distinct_series(
    served: tuple[Server, Exporter], fresh_queue: vtrr.Queue, tmp_path: Path
) -> None:
    queue = fresh_queue
    queue.enqueue_many(Item(name, f"i{n}", b"") for n, (name, _) in enumerate(ODD_PARTITIONS))
    assert queue.stats().partitions == len(ODD_PARTITIONS)
    named = Exporter(served[0].url, queue.name, "--top-k", "20", log=tmp_path / "named.log")
    try:
        text = named.text()
        samples = named.scrape()
    finally:
        named.stop()
    assert "\r" not in text and "\x00" not in text
    series = [(s.name, tuple(sorted(s.labels.items()))) for s in samples]
    assert len(series) == len(set(series)), "a series twice in one scrape"
    queued = of(samples, "vtrr_partition_items", queue=queue.name, state="ready")
    assert queued == {(label,): 1.0 for _, label in ODD_PARTITIONS} | {("other",): 0.0}
