"""`vtrr top`: one queue in a terminal, refreshed every second.

The queue's counts by state, its throughput (from the differences of its
totals between two reads), and its worst tenants by one ranking
(`VTRR.PARTITIONS ... TOP`, `b` cycles queued/oldest/leased/dead). Arrow
keys move the selection; `q` quits. Unless read-only (`vtrr top`'s default,
as the web view's: a keypress should not pause a tenant by mistake; `vtrr
top --write` steers), `p` pauses the selected tenant and `r` resumes it. A
refresh is one VTRR.STATS and one ranking of `top_k` partitions: bounded
work, whatever the number of partitions.

A tenant with a rate limit shows it (`rate`: `5/1000ms`, and `b10` when its
burst is not its amount) and its bucket (`tokens`: the whole tokens it holds,
or, while it holds none, when its next is due: `0, next in 120 ms`), counted
from this machine's clock at the read; a tenant without a rate shows `-`.

Built on Textual (the `top` extra): it reads keys and draws a table with a
selectable row, which curses would leave to this module. Reads run in a
thread, so a slow or lost server never freezes the keys.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import get_current_worker

from .client import Queue
from .types import RANKS, PartitionView, Rank, Stats, Totals

_COLUMNS = (
    "partition", "queued", "held", "leased", "delayed", "dead",
    "waiting s", "paused", "share", "cap", "max queued", "rate", "tokens", "acked", "nacked",
)  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class _Reading:
    """One refresh's read of the queue."""

    at: float  # monotonic seconds
    stats: Stats
    by: Rank
    ranked: int
    tenants: list[PartitionView]
    #: Unix ms at the read: when a tenant's next token is due is shown from it.
    wall_ms: int = dataclasses.field(default_factory=lambda: int(time.time() * 1000))


def _seconds(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}"


def _duration(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _rate(view: PartitionView) -> str:
    """`5/1000ms` (and ` b10` with a burst other than the amount, ` dflt` when it is
    the queue's default rate); `-` without a rate."""
    rate = view.rate or view.rate_in_force
    if rate is None:
        return "-"
    burst = "" if rate.burst is None or rate.burst == rate.amount else f" b{rate.burst}"
    default = " dflt" if view.rate is None else ""
    return f"{rate.amount}/{rate.per_ms}ms{burst}{default}"


def _tokens(view: PartitionView, now_ms: int) -> str:
    """The tokens in its bucket, and when the next is due while it holds none."""
    if view.tokens is None:
        return "-"
    if view.next_token_ms is None:
        return str(view.tokens)
    due_in = view.next_token_ms - now_ms
    return f"{view.tokens}, next " + ("due now" if due_in <= 0 else f"in {_duration(due_in)}")


def _per_second(now: _Reading, before: _Reading | None) -> str:
    if before is None or now.at <= before.at:
        return "per second: (after the next refresh)"
    elapsed = now.at - before.at
    after, then = now.stats.totals, before.stats.totals
    rates = (
        f"{name} {(getattr(after, name) - getattr(then, name)) / elapsed:.1f}"
        for name in (field.name for field in dataclasses.fields(Totals))
    )
    return "per second: " + "  ".join(rates)


def _row(view: PartitionView, now_ms: int) -> tuple[Text | int | str, ...]:
    return (
        Text(view.partition),  # as it is: a name is not markup
        view.queued,
        view.held,
        view.leased,
        view.delayed,
        view.dead,
        _seconds(view.waiting_ms),
        "paused" if view.paused else "",
        view.share,
        "-" if view.concurrency_in_force is None else view.concurrency_in_force,
        "-" if view.max_queued_in_force is None else view.max_queued_in_force,
        _rate(view),
        _tokens(view, now_ms),
        view.totals.acked,
        view.totals.nacked,
    )


class TopApp(App[None]):
    """The terminal view of one queue (`vtrr top`)."""

    TITLE = "vtrr top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("b", "next_ranking", "ranking"),
        Binding("p", "pause", "pause tenant"),
        Binding("r", "resume", "resume tenant"),
    ]
    CSS = "#status { color: $warning; }"

    def __init__(
        self, queue: Queue, *, top_k: int = 20, interval_s: float = 1.0, read_only: bool = False
    ) -> None:
        super().__init__()
        self.queue = queue
        self.top_k = top_k
        self.interval_s = interval_s
        self.read_only = read_only
        self.by: Rank = "queued"
        self._last: _Reading | None = None
        self._shown: list[str] = []  # the partitions in the table, in its order
        self._read_failed = False  # the status line says so until a read succeeds

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="counts")
        yield Static(id="ranking")
        yield DataTable(id="tenants", cursor_type="row", zebra_stripes=True)
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = self.queue.name + (" · read-only" if self.read_only else "")
        self.query_one(DataTable).add_columns(*_COLUMNS)
        self.read()
        self.set_interval(self.interval_s, self.read)

    @work(thread=True, exclusive=True, group="read")
    def read(self) -> None:
        """Read the queue in a thread; the screen is changed on the app's own."""
        by = self.by
        try:
            stats = self.queue.stats()
            ranked, tenants = self.queue.partitions_top(self.top_k, by)
        except Exception as error:  # shown, and the next refresh tries again
            self.call_from_thread(self._say, f"cannot read {self.queue.name}: {error}", True)
            return
        if not get_current_worker().is_cancelled:
            self.call_from_thread(
                self._show, _Reading(time.monotonic(), stats, by, ranked, tenants)
            )

    def _show(self, reading: _Reading) -> None:
        if not self.is_running:  # a read answered while the app closes: no screen to draw on
            return
        stats = reading.stats
        counts = (
            f"queued {stats.queued}  held {stats.held}  leased {stats.inflight}"
            f"  delayed {stats.delayed}  dead {stats.dead}"
            f"  ·  oldest waiting {_seconds(stats.oldest_waiting_ms)} s\n"
            f"partitions {stats.partitions}  paused {stats.paused_partitions}"
            f"  capped {stats.capped_partitions}  ·  expired leases {stats.expired}"
            f"  ·  layout {stats.layout}\n" + _per_second(reading, self._last)
        )
        self._last = reading
        self.query_one("#counts", Static).update(Text(counts))
        steering = (
            "read-only: vtrr top --write to pause and resume"
            if self.read_only
            else "p pause,  r resume"
        )
        self.query_one("#ranking", Static).update(
            Text(
                f"top {len(reading.tenants)} of {reading.ranked} by {reading.by}"
                f"  (b: queued / oldest / leased / dead;  ↑↓ select;  {steering})"
            )
        )
        table = self.query_one(DataTable)
        selected = self._selected()
        table.clear()
        for view in reading.tenants:
            table.add_row(*_row(view, reading.wall_ms))
        self._shown = [view.partition for view in reading.tenants]
        # The selection follows its tenant when the ranking reorders the rows.
        if selected in self._shown:
            table.move_cursor(row=self._shown.index(selected))
        if self._read_failed:
            self._say("")

    def _say(self, line: str, read_failed: bool = False) -> None:
        if not self.is_running:
            return
        self._read_failed = read_failed
        self.query_one("#status", Static).update(Text(line))

    def _selected(self) -> str | None:
        row = self.query_one(DataTable).cursor_row
        return self._shown[row] if 0 <= row < len(self._shown) else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only view neither offers `p` and `r` (the footer leaves them out) nor runs them."""
        return not (self.read_only and action in ("pause", "resume"))

    def action_next_ranking(self) -> None:
        self.by = RANKS[(RANKS.index(self.by) + 1) % len(RANKS)]
        self.read()

    def action_pause(self) -> None:
        if (partition := self._selected()) is not None:
            self.steer(partition, pause=True)

    def action_resume(self) -> None:
        if (partition := self._selected()) is not None:
            self.steer(partition, pause=False)

    @work(thread=True, group="steer")
    def steer(self, partition: str, *, pause: bool) -> None:
        """Pause or resume `partition`, then say so and read again."""
        try:
            if pause:
                changed = self.queue.pause(partition)
                line = f"paused {partition}" if changed else f"{partition} was already paused"
            else:
                changed = self.queue.resume(partition)
                line = f"resumed {partition}" if changed else f"{partition} was not paused"
        except Exception as error:
            line = f"cannot {'pause' if pause else 'resume'} {partition}: {error}"
        self.call_from_thread(self._say, line)
        self.call_from_thread(self.read)
