"""`Worker`: leases items and runs a handler on each, the way a job system must.

- Blocking leases (`VTRR.LEASE ... BLOCK ... WITHCOUNTERS`), `concurrency`
  handlers at once: threads for a plain function, asyncio tasks for a
  coroutine function (over an `AsyncQueue`).
- While a handler runs its lease is renewed about every third of the lease
  (`Heartbeat`); a RENEW that replies 0 means the lease is lost (the item was
  cancelled, or its lease expired and went to another worker): the job's
  `lost` flag is set for the handler to see, and it is never acked.
- A handler that returns: ACK. One that raises: NACK with an exponential
  backoff and jitter from the item's nack count (`Retry` sets the delay,
  `DeadLetter` sends the item to the dead letters). Giving up is the queue's
  POLICY (`MAX-NACKS`, `MAX-TIMEOUTS`), not the worker's.
- `stop()` (SIGTERM/SIGINT in `run()`): no new leases; running handlers get
  `grace_seconds` to finish, then their items go back by `NACK ... RELEASE`
  (at once, so another worker takes them, and uncounted: a deploy is no
  failure, so it never brings an item nearer MAX-NACKS) and `cancelled` is
  set on their jobs.
- A NACK reports where the item went: one the queue's MAX-NACKS
  dead-lettered is logged and reported as dead, not as a retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import os
import random
import signal
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, Protocol, Self

from .client import AsyncQueue, Fenced
from .limits import MAX_BLOCK_MS, MAX_MS, check_int
from .types import NackOutcome

logger = logging.getLogger("vtrr.worker")


class Leased(Fenced, Protocol):
    """A leased item: a `vtrr.Lease`, or a `vtrr.ShardedLease`."""

    @property
    def payload(self) -> bytes: ...

    @property
    def timeouts(self) -> int: ...

    @property
    def nacks(self) -> int: ...


class Renewing(Protocol):
    """What a Heartbeat needs of a queue."""

    def renew(self, lease: Any, lease_ms: int) -> bool: ...


class LeaseQueue(Renewing, Protocol):
    """What a threaded Worker needs of a queue: a `vtrr.Queue` or a `vtrr.ShardedQueue`."""

    @property
    def name(self) -> str: ...

    def lease(self, lease_ms: int, *, block_ms: int | None = None) -> Leased | None: ...

    def ack(self, *leases: Any) -> int: ...

    def nack(
        self, lease: Any, *, delay_ms: int | None = None, dead: bool = False
    ) -> NackOutcome | None: ...

    def release(self, lease: Any) -> bool: ...


class Retry(Exception):
    """Raised by a handler: NACK the item, due again after `delay_ms` (None: the backoff)."""

    def __init__(self, delay_ms: int | None = None) -> None:
        if delay_ms is not None:
            check_int("delay_ms", delay_ms, 0, MAX_MS)
        super().__init__(f"retry after {delay_ms} ms" if delay_ms is not None else "retry")
        self.delay_ms = delay_ms


class DeadLetter(Exception):
    """Raised by a handler: the item can never succeed; NACK ... DEAD (VTRR.DEAD lists it)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before the n-th retry: `base_ms`·2ⁿ capped at `max_ms`, minus up to `jitter` of it.

    The jitter is drawn at random ("equal jitter" with `jitter=0.5`): items
    that failed together do not all come back at the same moment.
    """

    base_ms: int = 1_000
    max_ms: int = 3_600_000
    jitter: float = 0.5

    def __post_init__(self) -> None:
        check_int("max_ms", self.max_ms, 0, MAX_MS)
        check_int("base_ms", self.base_ms, 0, self.max_ms)
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be between 0 and 1")

    def delay_ms(self, nacks: int, rng: random.Random | None = None) -> int:
        """The delay for an item already nacked `nacks` times."""
        full = min(self.max_ms, self.base_ms * 2 ** min(nacks, 62))
        draw = (rng or random).random()
        return int(full - full * self.jitter * draw)


@dataclasses.dataclass(slots=True)
class Job:
    """One leased item as a handler sees it."""

    lease: Leased
    queue_name: str
    lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set when the lease was lost (RENEW replied 0): stop; the result will not be acked."""
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set when shutdown's grace period ended and the item went back to the queue."""
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def id(self) -> str:
        return self.lease.id

    @property
    def token(self) -> str:
        return self.lease.token

    @property
    def payload(self) -> bytes:
        return self.lease.payload

    @property
    def timeouts(self) -> int:
        return self.lease.timeouts

    @property
    def nacks(self) -> int:
        return self.lease.nacks

    def should_stop(self) -> bool:
        """True once the handler's work can no longer count (lease lost or given back)."""
        return self.lost.is_set() or self.cancelled.is_set()


@dataclasses.dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks for logging and metrics; each runs in the handler's thread or task."""

    leased: Callable[[Job], None] | None = None
    succeeded: Callable[[Job, float], None] | None = None
    """The job and the handler's run time in seconds."""
    failed: Callable[[Job, BaseException, int | None], None] | None = None
    """The job, the error, and the retry delay in ms (None: dead-lettered, by the
    handler's `DeadLetter` or by the queue's MAX-NACKS)."""
    lost: Callable[[Job], None] | None = None


class Heartbeat:
    """Renews the leases it tracks about every third of `lease_ms`, in one thread.

    A lease is renewed while the thread that tracked it lives: a thread that
    ends without `untrack` (killed by an error its framework did not catch)
    lets its lease expire, so the queue's timer reclaims the item, as if that
    worker had crashed, instead of keeping it leased for as long as the
    process lives.

    Fork-safe: a forked child (Celery's prefork pool, threadmill's worker
    processes) starts with nothing tracked and its own thread on first use;
    the parent's leases stay the parent's.
    """

    def __init__(self, queue: Renewing, lease_ms: int) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self._reset()
        _heartbeats.add(self)

    def _reset(self) -> None:
        # Keyed by lease, with every thread that tracks it: one lease can be
        # tracked twice at once (a Celery retry run in the process of the run
        # it retries); it is renewed until the last of them lets go.
        self._tracked: dict[
            tuple[str, str], tuple[Fenced, threading.Event, list[threading.Thread]]
        ] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, lease: Fenced) -> threading.Event:
        """Renew `lease` while this thread lives; the event is set if a RENEW finds it lost."""
        key = (lease.id, lease.token)
        with self._lock:
            _, lost, owners = self._tracked.get(key, (lease, threading.Event(), []))
            self._tracked[key] = (lease, lost, [*owners, threading.current_thread()])
            self._start_locked()
        return lost

    def untrack(self, lease: Fenced) -> None:
        """This thread stops holding `lease`; renewals stop once no thread holds it."""
        key = (lease.id, lease.token)
        with self._lock:
            found = self._tracked.get(key)
            if found is None:
                return
            owners = list(found[2])
            me = threading.current_thread()
            owners.remove(me if me in owners else owners[0])
            if owners:
                self._tracked[key] = (found[0], found[1], owners)
            else:
                del self._tracked[key]

    def start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._run, name="vtrr-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def renew_all(self) -> None:
        """One pass: renew every tracked lease; mark and drop the lost ones."""
        with self._lock:
            for key, (lease, _, owners) in list(self._tracked.items()):
                if not any(owner.is_alive() for owner in owners):
                    logger.warning(
                        "the thread holding the lease of %s ended without settling it: "
                        "it is no longer renewed and will be reclaimed when it expires",
                        lease.id,
                    )
                    del self._tracked[key]
            tracked = [(lease, lost) for lease, lost, _ in self._tracked.values()]
        for lease, lost in tracked:
            try:
                renewed = self.queue.renew(lease, self.lease_ms)
            except Exception:  # a failed RENEW is retried next pass; the lease may still be ours
                logger.exception("RENEW of %s failed", lease.id)
                continue
            if not renewed:
                lost.set()
                with self._lock:
                    self._tracked.pop((lease.id, lease.token), None)

    def _run(self) -> None:
        while not self._stopping.wait(self.lease_ms / 3000):
            self.renew_all()


_heartbeats: weakref.WeakSet[Heartbeat] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Only the forking thread survives a fork: the heartbeat threads (and any
    # lock one of them held) are gone, and the leases are the parent's.
    for heartbeat in list(_heartbeats):
        heartbeat._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _call_hook(hook: Callable[..., None] | None, *args: Any) -> None:
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:  # a broken metrics hook must not lose an item
        logger.exception("worker hook %r failed", hook)


def _settling_failed(job: Job) -> None:
    # The lease stays with this worker until it expires; the timer then reclaims the item.
    logger.exception("settling %s failed; its lease will expire and be reclaimed", job.id)


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    """What to tell the queue once a handler is done."""

    ack: bool
    delay_ms: int | None = None
    dead: bool = False
    error: BaseException | None = None


def _outcome(error: BaseException | None, job: Job, backoff: Backoff) -> _Outcome:
    if error is None:
        return _Outcome(ack=True)
    if isinstance(error, DeadLetter):
        return _Outcome(ack=False, dead=True, error=error)
    if isinstance(error, Retry) and error.delay_ms is not None:
        return _Outcome(ack=False, delay_ms=error.delay_ms, error=error)
    return _Outcome(ack=False, delay_ms=backoff.delay_ms(job.nacks), error=error)


Handler = Callable[[Job], object]
AsyncHandler = Callable[[Job], Awaitable[object]]


class Worker:
    """Runs `handler(job)` on the items of `queue`, `concurrency` at a time.

    A plain function runs in `concurrency` threads over a `Queue` (or a
    `ShardedQueue`: the same worker across sub-queues, by its weighted
    rotation); a coroutine function runs as that many asyncio tasks over an
    `AsyncQueue`
    (`run()` starts the event loop; `await run_async()` inside one).
    """

    def __init__(
        self,
        queue: LeaseQueue | AsyncQueue,
        handler: Handler | AsyncHandler,
        *,
        concurrency: int = 1,
        lease_ms: int = 30_000,
        block_ms: int = 1_000,
        backoff: Backoff | None = None,
        grace_seconds: float = 30.0,
        hooks: Hooks | None = None,
        exit_when_idle: bool = False,
    ) -> None:
        check_int("concurrency", concurrency, 1, 100_000)
        check_int("lease_ms", lease_ms, 3, MAX_MS)  # renewed every third
        # Positive: between two waits a handler thread sees stop() (BLOCK 0 waits forever).
        check_int("block_ms", block_ms, 1, MAX_BLOCK_MS)
        if grace_seconds < 0:
            raise ValueError("grace_seconds must not be negative")
        self.is_async = inspect.iscoroutinefunction(handler)
        if self.is_async and not isinstance(queue, AsyncQueue):
            raise TypeError("a coroutine handler needs a vtrr.AsyncQueue (over redis.asyncio)")
        if not self.is_async and isinstance(queue, AsyncQueue):
            raise TypeError(
                "a plain handler needs a vtrr.Queue (an AsyncQueue needs an async def handler)"
            )
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.block_ms = block_ms
        self.backoff = backoff or Backoff()
        self.grace_seconds = grace_seconds
        self.hooks = hooks or Hooks()
        self.exit_when_idle = exit_when_idle
        self.stopping = threading.Event()
        self._running: dict[tuple[str, str], Job] = {}
        self._closed = False
        """Set once shutdown gave back what was running: a lease that arrives later goes back too."""
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Stop leasing; `run()` returns once the running handlers finish (or the grace ends)."""
        self.stopping.set()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info(
                "signal %s: stopping (grace %.1f s)",
                signal.Signals(signum).name,
                self.grace_seconds,
            )
            self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def run(self) -> None:
        """Work until `stop()`, SIGTERM or SIGINT (or, with `exit_when_idle`, an empty queue)."""
        with self._signals():
            if self.is_async:
                asyncio.run(self.run_async())
            else:
                self._run_threads()

    # Threads.
    def _run_threads(self) -> None:
        assert not isinstance(self.queue, AsyncQueue)
        heartbeat = Heartbeat(self.queue, self.lease_ms)
        threads = [
            threading.Thread(
                target=self._thread_loop, args=(heartbeat,), name=f"vtrr-worker-{i}", daemon=True
            )
            for i in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads) and not self.stopping.wait(0.1):
                pass
            deadline = time.monotonic() + self.grace_seconds
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            self._give_back(self.queue, self._abandoned())
        finally:
            heartbeat.stop()

    def _thread_loop(self, heartbeat: Heartbeat) -> None:
        assert not isinstance(self.queue, AsyncQueue)
        handler: Handler = self.handler
        while not self.stopping.is_set():
            try:
                lease = self.queue.lease(self.lease_ms, block_ms=self.block_ms)
            except Exception:
                logger.exception("LEASE from %s failed; retrying in 1 s", self.queue.name)
                self.stopping.wait(1.0)
                continue
            if lease is None:
                if self.exit_when_idle:
                    return
                continue
            job = Job(lease, self.queue.name, lost=heartbeat.track(lease))
            if not self._started(job):
                heartbeat.untrack(lease)
                self._give_back(self.queue, [job])
                return
            error: BaseException | None = None
            try:
                handler(job)
            except Exception as raised:
                error = raised
            finally:
                heartbeat.untrack(lease)
            self._finish(job, error, self.queue)

    # Asyncio tasks.
    async def run_async(self) -> None:
        """The asyncio form of `run()` (no signal handlers: the caller's loop owns those)."""
        assert isinstance(self.queue, AsyncQueue)
        renewing = asyncio.create_task(self._renew_async())
        tasks = [asyncio.create_task(self._task_loop()) for _ in range(self.concurrency)]
        try:
            while not all(task.done() for task in tasks) and not self.stopping.is_set():
                await asyncio.sleep(0.1)
            _, pending = await asyncio.wait(tasks, timeout=self.grace_seconds)
            for task in pending:
                task.cancel()
            await self._give_back_async(self._abandoned())
        finally:
            renewing.cancel()

    async def _task_loop(self) -> None:
        assert isinstance(self.queue, AsyncQueue)
        handler: AsyncHandler = self.handler  # type: ignore[assignment]
        while not self.stopping.is_set():
            try:
                lease = await self.queue.lease(self.lease_ms, block_ms=self.block_ms)
            except Exception:
                logger.exception("LEASE from %s failed; retrying in 1 s", self.queue.name)
                await asyncio.sleep(1.0)
                continue
            if lease is None:
                if self.exit_when_idle:
                    return
                continue
            job = Job(lease, self.queue.name)
            if not self._started(job):
                await self._give_back_async([job])
                return
            error: BaseException | None = None
            try:
                await handler(job)
            except asyncio.CancelledError:
                # Shutdown's grace ended: _give_back_async nacks it.
                raise
            except Exception as raised:
                error = raised
            await self._finish_async(job, error)

    async def _renew_async(self) -> None:
        assert isinstance(self.queue, AsyncQueue)
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            for job in self._snapshot():
                try:
                    renewed = await self.queue.renew(job.lease, self.lease_ms)
                except Exception:
                    logger.exception("RENEW of %s failed", job.id)
                    continue
                if not renewed:
                    job.lost.set()

    # Shared bookkeeping: one place decides what a handler's end means.
    def _started(self, job: Job) -> bool:
        """Record a leased job; False (give it back unrun) once shutdown has closed the worker."""
        with self._lock:
            if self._closed:
                return False
            self._running[(job.id, job.token)] = job
        _call_hook(self.hooks.leased, job)
        return True

    def _snapshot(self) -> list[Job]:
        with self._lock:
            return list(self._running.values())

    def _settled(self, job: Job) -> bool:
        """Take the job out of the running set; False if shutdown already gave it back."""
        with self._lock:
            return self._running.pop((job.id, job.token), None) is not None

    def _plan(self, job: Job, error: BaseException | None) -> _Outcome | None:
        """What to tell the queue about a finished handler; None when nothing (given back, or lost)."""
        if not self._settled(job):
            return None
        if job.lost.is_set():
            self._report_lost(job)
            return None
        return _outcome(error, job, self.backoff)

    def _finish(self, job: Job, error: BaseException | None, queue: LeaseQueue) -> None:
        outcome = self._plan(job, error)
        if outcome is None:
            return
        settled: bool | NackOutcome | None
        try:
            if outcome.ack:
                settled = queue.ack(job.lease) == 1
            else:
                settled = queue.nack(job.lease, delay_ms=outcome.delay_ms, dead=outcome.dead)
        except Exception:
            _settling_failed(job)
            return
        self._report(job, outcome, settled)

    async def _finish_async(self, job: Job, error: BaseException | None) -> None:
        assert isinstance(self.queue, AsyncQueue)
        outcome = self._plan(job, error)
        if outcome is None:
            return
        settled: bool | NackOutcome | None
        try:
            if outcome.ack:
                settled = await self.queue.ack(job.lease) == 1
            else:
                settled = await self.queue.nack(
                    job.lease, delay_ms=outcome.delay_ms, dead=outcome.dead
                )
        except Exception:
            _settling_failed(job)
            return
        self._report(job, outcome, settled)

    def _report(self, job: Job, outcome: _Outcome, settled: bool | NackOutcome | None) -> None:
        """`settled`: ACK's True, or where NACK sent the item; falsy when the lease was lost."""
        if not settled:
            job.lost.set()
            self._report_lost(job)
        elif outcome.error is None:
            _call_hook(self.hooks.succeeded, job, time.monotonic() - job.started)
        elif settled is NackOutcome.DEAD:
            why = "dead-lettered" if outcome.dead else "dead-lettered by the queue's MAX-NACKS"
            logger.warning("%s failed (%r): %s", job.id, outcome.error, why)
            _call_hook(self.hooks.failed, job, outcome.error, None)
        else:
            logger.warning(
                "%s failed (%r): retry in %s ms", job.id, outcome.error, outcome.delay_ms
            )
            _call_hook(self.hooks.failed, job, outcome.error, outcome.delay_ms)

    def _report_lost(self, job: Job) -> None:
        logger.warning("lease of %s was lost: not acked", job.id)
        _call_hook(self.hooks.lost, job)

    def _give_back(self, queue: LeaseQueue, jobs: list[Job]) -> None:
        for job in jobs:
            try:
                queue.release(job.lease)
            except Exception:
                logger.exception("giving back %s failed; its lease will expire", job.id)

    async def _give_back_async(self, jobs: list[Job]) -> None:
        assert isinstance(self.queue, AsyncQueue)
        for job in jobs:
            try:
                await self.queue.release(job.lease)
            except Exception:
                logger.exception("giving back %s failed; its lease will expire", job.id)

    def _abandoned(self) -> list[Job]:
        """The jobs still running when the grace ended: marked cancelled, no longer ours."""
        with self._lock:
            self._closed = True
            jobs = list(self._running.values())
            self._running.clear()
        for job in jobs:
            logger.warning("grace period over: %s goes back to the queue", job.id)
            job.cancelled.set()
        return jobs
