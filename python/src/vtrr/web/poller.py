"""One poller per queue, shared by every page and stream that shows it.

A poller reads the queue once per interval — `VTRR.STATS` and two rankings
of `VTRR.PARTITIONS ... TOP` (most queued, longest waiting) — and keeps the
samples of the last ten minutes for the charts. It runs while someone
watches: the first page or stream that watches starts it, and it stops
`linger_s` after the last one left (a page load followed by its stream's
connection, or a move between two pages of the same queue, does not restart
it). Ten open tabs cost the server what one does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator

import redis

from ..client import Queue
from ..errors import VTRRError
from ..types import PartitionView, Stats

HISTORY_SECONDS = 600.0

log = logging.getLogger("vtrr.web")


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """What one poll read; `error` instead when the server could not answer."""

    at: float  # Unix seconds
    stats: Stats | None
    most_queued: tuple[PartitionView, ...]
    longest_waiting: tuple[PartitionView, ...]
    error: str | None = None


def read_sample(queue: Queue, top_k: int) -> Sample:
    """One poll (blocking: run it in a thread)."""
    try:
        stats = queue.stats()
        _, most_queued = queue.partitions_top(top_k, "queued")
        _, longest_waiting = queue.partitions_top(top_k, "oldest")
    except (redis.exceptions.RedisError, VTRRError) as error:
        return Sample(time.time(), None, (), (), error=describe(error))
    except Exception as error:  # a reply this client cannot read: shown, and the poller goes on
        return Sample(time.time(), None, (), (), error=describe(error))
    return Sample(time.time(), stats, tuple(most_queued), tuple(longest_waiting))


def describe(error: Exception) -> str:
    """An error as one line for the banner: what failed, never a traceback."""
    if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return f"Redis cannot be reached: {error}"
    return f"{type(error).__name__}: {error}"


class QueuePoller:
    def __init__(self, queue: Queue, *, interval_s: float, top_k: int, linger_s: float) -> None:
        self.queue = queue
        self.interval_s = interval_s
        self.top_k = top_k
        self.linger_s = linger_s
        self.history: collections.deque[Sample] = collections.deque(
            maxlen=math.ceil(HISTORY_SECONDS / interval_s) + 1
        )
        self._watchers = 0
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.TimerHandle | None = None
        self._published = asyncio.Event()

    @property
    def latest(self) -> Sample | None:
        return self.history[-1] if self.history else None

    @property
    def running(self) -> bool:
        return self._task is not None

    def watch(self) -> None:
        self._watchers += 1
        if self._stop is not None:
            self._stop.cancel()
            self._stop = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"vtrr-web-poll:{self.queue.name}"
            )

    def unwatch(self) -> None:
        self._watchers -= 1
        if self._watchers == 0:
            self._stop = asyncio.get_running_loop().call_later(self.linger_s, self.stop)

    def stop(self) -> None:
        self._stop = None
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def sample(self) -> Sample:
        """The latest sample; the next one when there is none yet, or the latest is from
        before the poller last stopped."""
        if self.latest is None or time.time() - self.latest.at > 2 * self.interval_s:
            await self.next_sample()
        assert self.latest is not None
        return self.latest

    async def next_sample(self) -> Sample:
        """The sample of the next poll."""
        published = self._published
        await published.wait()
        assert self.latest is not None
        return self.latest

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            sample = await asyncio.to_thread(read_sample, self.queue, self.top_k)
            # Logged once when it starts failing, or fails otherwise, not at every poll.
            if sample.error and (self.latest is None or self.latest.error != sample.error):
                log.warning("queue=%r poll failed: %s", self.queue.name, sample.error)
            self.history.append(sample)
            # Wake whoever waits on this poll; the next waiters wait on a new event.
            published, self._published = self._published, asyncio.Event()
            published.set()
            await asyncio.sleep(max(0.0, self.interval_s - (loop.time() - started)))


class Pollers:
    """The pollers of an app, made on first use, one per queue."""

    def __init__(
        self, client: redis.Redis | redis.RedisCluster, *, interval_s: float, top_k: int
    ) -> None:
        self._client = client
        self._interval_s = interval_s
        self._top_k = top_k
        self._linger_s = max(2.0, 3 * interval_s)
        self._pollers: dict[str, QueuePoller] = {}

    def __getitem__(self, name: str) -> QueuePoller:
        if name not in self._pollers:
            self._pollers[name] = QueuePoller(
                Queue(self._client, name),
                interval_s=self._interval_s,
                top_k=self._top_k,
                linger_s=self._linger_s,
            )
        return self._pollers[name]

    @contextlib.asynccontextmanager
    async def watching(self, *names: str) -> AsyncIterator[list[QueuePoller]]:
        """The pollers of these queues, running while the block runs."""
        pollers = [self[name] for name in names]
        for poller in pollers:
            poller.watch()
        try:
            yield pollers
        finally:
            for poller in pollers:
                poller.unwatch()

    def stop_all(self) -> None:
        for poller in self._pollers.values():
            poller.stop()
