"""The queue page's charts, computed from a poller's history and drawn as inline SVG.

Only geometry is computed here (polyline points, tick positions, bar
lengths); `templates/_charts.html` draws it. Server-side SVG needs no chart
library in the page and updates with the rest of the fragment the stream
sends.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from ..types import Totals
from .poller import HISTORY_SECONDS, Sample

WIDTH = 640
HEIGHT = 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 8, 10, 22
# Per-tenant service is compared over the last minute: long enough to count
# some leases, short enough to show a tenant starved now.
SERVICE_WINDOW_SECONDS = 60.0
MIN_SPAN_SECONDS = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class Series:
    label: str
    css_class: str
    points: str  # "x,y x,y ..." for <polyline>
    latest: str  # the last value, formatted, for the legend


@dataclasses.dataclass(frozen=True, slots=True)
class LineChart:
    title: str
    series: tuple[Series, ...]
    y_ticks: tuple[tuple[float, str], ...]  # (y in px, label)
    x_ticks: tuple[tuple[float, str], ...]
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = _LEFT
    plot_right: int = WIDTH - _RIGHT
    plot_top: int = _TOP
    plot_bottom: int = HEIGHT - _BOTTOM


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceBar:
    tenant: str
    leased: int
    served: float  # fraction of the leases these tenants got
    due: float  # fraction their shares entitle them to


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceChart:
    bars: tuple[ServiceBar, ...]
    span_s: float
    full: float = 1.0  # the fraction a bar across the whole plot stands for
    width: int = WIDTH
    label_width: int = 150
    row_height: int = 18


def compact(value: float) -> str:
    """1234 -> "1.2k": an axis label or a legend value."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else str(int(value))


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    raise AssertionError("unreachable")


def _ago(seconds: float) -> str:
    if seconds == 0:
        return "now"
    return f"-{seconds / 60:g} min" if seconds >= 120 else f"-{seconds:g} s"


def _line_chart(
    title: str,
    now: float,
    lines: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    unit: str,
) -> LineChart:
    """Lines of (Unix time, value) ending `now`, over the history there is: a minute
    at least (a view just opened is not a sliver at the edge), ten at most."""
    plot_width = WIDTH - _LEFT - _RIGHT
    plot_height = HEIGHT - _TOP - _BOTTOM
    y_max = _nice_ceiling(max((v for _, _, pts in lines for _, v in pts), default=0.0))
    oldest = min((pts[0][0] for _, _, pts in lines if pts), default=now)
    span = min(HISTORY_SECONDS, max(MIN_SPAN_SECONDS, math.ceil((now - oldest) / 60) * 60))

    def x(at: float) -> float:
        return _LEFT + plot_width * (1 - (now - at) / span)

    def y(value: float) -> float:
        return _TOP + plot_height * (1 - value / y_max)

    series = tuple(
        Series(
            label,
            css_class,
            " ".join(f"{x(at):.1f},{y(v):.1f}" for at, v in points if now - at <= span),
            compact(points[-1][1]) + unit if points else "-",
        )
        for label, css_class, points in lines
    )
    y_ticks = tuple((y(y_max * f), compact(y_max * f) + unit) for f in (0, 0.5, 1))
    x_ticks = tuple((x(now - ago), _ago(ago)) for ago in (span, span / 2, 0))
    return LineChart(title, series, y_ticks, x_ticks)


def _rate(field: Callable[[Totals], int], history: Sequence[Sample]) -> list[tuple[float, float]]:
    """Per-second deltas of a totals counter between consecutive good samples."""
    points = []
    previous: Sample | None = None
    for sample in history:
        if sample.stats is None:
            previous = None  # a gap: no rate across it
            continue
        if previous is not None and previous.stats is not None and sample.at > previous.at:
            delta = field(sample.stats.totals) - field(previous.stats.totals)
            if delta >= 0:  # a queue deleted and made again starts its counters over
                points.append((sample.at, delta / (sample.at - previous.at)))
        previous = sample
    return points


def throughput(history: Sequence[Sample], now: float) -> LineChart:
    return _line_chart(
        "Throughput (items/s)",
        now,
        [
            ("enqueued", "s-enqueued", _rate(lambda t: t.enqueued, history)),
            ("leased", "s-leased", _rate(lambda t: t.leased, history)),
            ("acked", "s-acked", _rate(lambda t: t.acked, history)),
            ("dead", "s-dead", _rate(lambda t: t.dead, history)),
        ],
        "/s",
    )


def waiting(history: Sequence[Sample], now: float) -> LineChart:
    """How long the worst-off tenants' lines have gone unserved."""
    worst, median = [], []
    for sample in history:
        waits = [v.waiting_ms for v in sample.longest_waiting if v.waiting_ms is not None]
        if waits:
            worst.append((sample.at, max(waits) / 1000))
            median.append((sample.at, statistics.median(waits) / 1000))
    return _line_chart(
        "Waiting of the worst-off tenants (s)",
        now,
        [("worst tenant", "s-worst", worst), ("median of the top", "s-median", median)],
        "s",
    )


def service(history: Sequence[Sample], now: float) -> ServiceChart:
    """Leases each backlogged tenant got over the last minute, against what its share is due.

    The tenants are the most queued ones of the latest sample that can be
    served (not paused, not all held by a cap). A tenant's rate is its
    `leased` total now minus at the first sample of the window that saw it,
    over the time between: tenants enter the top at different times, so
    rates, not counts, compare. Among them the fair queue serves in
    proportion to share (by weight; this counts items).
    """
    good = [s for s in history if s.stats is not None and now - s.at <= SERVICE_WINDOW_SECONDS]
    if len(good) < 2:
        return ServiceChart((), 0.0)
    latest = good[-1]
    # Owed service: items it could be leased now (the server's `queued` counts those held
    # behind a cap too), and not paused.
    backlogged = [v for v in latest.most_queued if v.queued > v.held and not v.paused]
    first_seen: dict[str, tuple[float, int]] = {}
    for sample in good[:-1]:
        for view in (*sample.most_queued, *sample.longest_waiting):
            first_seen.setdefault(view.partition, (sample.at, view.totals.leased))
    leased: dict[str, int] = {}
    rates: dict[str, float] = {}
    for v in backlogged:
        if v.partition not in first_seen:
            continue
        since, before = first_seen[v.partition]
        leased[v.partition] = max(0, v.totals.leased - before)
        rates[v.partition] = leased[v.partition] / max(latest.at - since, 1e-9)
    tenants = [v for v in backlogged if v.partition in rates]
    total_rate = sum(rates.values())
    total_share = sum(v.share for v in tenants)
    bars = tuple(
        ServiceBar(
            v.partition,
            leased[v.partition],
            rates[v.partition] / total_rate if total_rate else 0.0,
            v.share / total_share if total_share else 0.0,
        )
        for v in tenants
    )
    # Scaled to the largest fraction: with 20 tenants at 5% each, bars at 5% of the width would not show.
    full = max((max(bar.served, bar.due) for bar in bars), default=1.0) or 1.0
    return ServiceChart(bars, latest.at - good[0].at, full)
