"""`Worker`: leases items and runs a handler on each, the way a job system must.

One dispatcher per process owns the queue's connection; handlers only run
jobs. Each round trip of the dispatcher (`vtrr.exchange`) does everything
due at once: the NACKs of failed jobs (`WITHSTATE`: where each item went),
the RENEWs of every running lease when a third of the lease has passed, and
one `VTRR.LEASE ... COUNT <free slots> ACK <succeeded jobs>` that finishes
the jobs that returned and leases the next ones (`ACKCOST` with what each
cost, when the worker reports costs). Under load a round trip
settles and refills several handlers; a worker with nothing running waits
in the server (`BLOCK`) rather than polling it.

- `concurrency` handlers at once: threads for a plain function, asyncio
  tasks for a coroutine function (over an `AsyncQueue`); the same
  dispatcher decides for both (`_Dispatch`), only its I/O differs.
- A RENEW that replies 0 means the lease is lost (the item was cancelled,
  or its lease expired and went to another worker): the job's `lost` flag
  is set for the handler to see, and it is never acked.
- A handler that returns: ACK; what it returned, unless None, is the job's
  result (`ACKRESULT`: bytes as they are, a str in UTF-8, anything else as
  JSON), which `Queue.result` reads while the queue's policy keeps it. One
  that raises (anything, `SystemExit` and
  a task's `CancelledError` included: a handler never ends the worker):
  NACK with an exponential backoff and jitter from the item's nack count
  (`Retry` sets the delay, `DeadLetter` sends the item to the dead letters),
  and `REASON`: the exception's one-line summary and its traceback
  (`failure_reason`), which the item keeps as its last error (`vtrr dead`
  shows it once it dies). The log has the traceback too, with the item's
  partition: at WARNING when it will be retried, at ERROR when it died.
  Giving up is the queue's POLICY (`MAX-NACKS`, `MAX-TIMEOUTS`), and a NACK
  the policy turned into a death is reported as one.
- `stop()` (SIGTERM/SIGINT in `run()`): no new leases (items a lease already
  under way brings back go back unrun); running handlers get
  `grace_seconds` to finish, then their items go back by `NACK ... RELEASE`
  (at once, and uncounted: a deploy is no failure) and `cancelled` is set
  on their jobs. `stop(at_once=True)` (a second signal) ends the grace now.
- A server that cannot be reached is retried with a capped backoff, logged
  once per change of state; a permanent error (the module not loaded, a
  key of the wrong type, no permission) stops the worker with that error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import queue as queue_module
import random
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Generator, Iterator
from types import FrameType
from typing import Any, Literal, Protocol, cast

import redis
import redis.asyncio
import redis.exceptions

from .client import AsyncQueue, Queue, server_of
from .errors import InvalidArgument, ModuleNotLoaded, NoPermission, WrongType
from .exchange import Exchange, Exchanged, GiveBack
from .limits import MAX_BLOCK_MS, MAX_COST, MAX_MS, MAX_REASON_BYTES, check_int, check_result
from .types import Fenced, NackOutcome

logger = logging.getLogger("vtrr.worker")
# The log lines of the package's processes (`vtrr worker`, `vtrr exporter`, `manage.py vtrr_worker`).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# While handlers run and the queue looked empty, the dispatcher asks again
# this often (a finished job's settling asks at once, with a lease).
IDLE_POLL_SECONDS = 0.05
# The longest the dispatcher sleeps between looks at stop() and the clock.
LONGEST_NAP_SECONDS = 0.1
# Handlers quicker than this on average finish while the dispatcher would
# start its round trip: it yields to them first (see `handlers_are_quick`).
QUICK_HANDLER_SECONDS = 0.0002
# Errors no retry can mend: the worker stops with them.
PERMANENT = (ModuleNotLoaded, NoPermission, WrongType, InvalidArgument)


class Leased(Fenced, Protocol):
    """A leased item: a `vtrr.Lease`, or a `vtrr.ShardedLease`."""

    @property
    def payload(self) -> bytes: ...

    @property
    def timeouts(self) -> int: ...

    @property
    def nacks(self) -> int: ...

    @property
    def partition(self) -> str | None: ...


class Exchanging(Protocol):
    """What a threaded Worker needs of a queue: a `vtrr.Queue` or a `vtrr.ShardedQueue`."""

    @property
    def name(self) -> str: ...

    def exchange(self, sent: Exchange) -> Exchanged: ...

    def stats(self) -> Any: ...


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
    """When its handler started (time.monotonic())."""
    ran_for: float = 0.0
    """How long its handler ran, in seconds, once it returned or raised."""
    cost: int | None = None
    """What the job really cost in all, in the weights' units, set by its
    handler (tokens, bytes) when the worker reports costs
    (`Worker(cost="time")`); left unset, the job reports its run time in
    milliseconds. What its renewals reported meanwhile (run time) is
    subtracted at the end."""
    reported_ms: int = 0
    """Run time its renewals have reported (`RENEW ... COST`), in ms."""

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

    @property
    def partition(self) -> str | None:
        """The item's partition (tenant)."""
        return self.lease.partition

    def should_stop(self) -> bool:
        """True once the handler's work can no longer count (lease lost or given back)."""
        return self.lost.is_set() or self.cancelled.is_set()


@dataclasses.dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks for logging and metrics; each runs in the dispatcher, so keep them quick."""

    leased: Callable[[Job], None] | None = None
    succeeded: Callable[[Job, float], None] | None = None
    """The job and the handler's run time in seconds."""
    failed: Callable[[Job, BaseException, int | None], None] | None = None
    """The job, the error, and the retry delay in ms (None: dead-lettered, by the
    handler's `DeadLetter` or by the queue's MAX-NACKS)."""
    lost: Callable[[Job], None] | None = None


def _call_hook(hook: Callable[..., None] | None, *args: Any) -> None:
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:  # a broken metrics hook must not lose an item
        logger.exception("worker hook %r failed", hook)


def failure_reason(error: BaseException) -> str:
    """What a NACK's REASON says of `error`: its one-line summary, then its traceback.

    At most MAX_REASON_BYTES in UTF-8: past that each line is cut to an
    eighth of them (`...` at the cut), then the summary and the end of the
    traceback, where it was raised, are kept, a `...` line between them.
    """
    lines = traceback.format_exception_only(error)
    # A SyntaxError's source lines come before its summary, notes after it.
    first = next((line for line in lines if not line.startswith(" ")), lines[-1])
    summary = (first.strip().splitlines() or [type(error).__name__])[0]
    text = f"{summary}\n{''.join(traceback.format_exception(error)).rstrip()}"
    # Lone surrogates (an exception's text may hold any) as escapes: valid UTF-8.
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) > MAX_REASON_BYTES:
        longest = MAX_REASON_BYTES // 8
        head, *rest = (
            line[:longest] + b"..." if len(line) > longest else line for line in raw.split(b"\n")
        )
        body = b"\n".join(rest)
        if len(head) + 1 + len(body) <= MAX_REASON_BYTES:
            raw = head + b"\n" + body
        else:
            gap = b"\n...\n"
            raw = head + gap + body[len(body) - (MAX_REASON_BYTES - len(head) - len(gap)) :]
    # A cut may split a character: its pieces go.
    return raw.decode("utf-8", "ignore")


def job_result(value: object) -> bytes | None:
    """What a handler's return value keeps as its job's result (VTRR.ACKRESULT):
    None nothing, bytes as they are, a str in UTF-8, anything else as JSON.

    Raises TypeError or ValueError for a value JSON cannot write, and
    `InvalidArgument` for one over 1 MiB (the module's bound).
    """
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return check_result(bytes(value))
    if isinstance(value, str):
        return check_result(value)
    return check_result(json.dumps(value, separators=(",", ":"), allow_nan=False))


def _kept_result(job: Job, value: object) -> bytes | None:
    """`job_result(value)`; None, said in the log, for a value that cannot be
    kept: the job did its work, so it is acked all the same."""
    try:
        return job_result(value)
    except (TypeError, ValueError) as error:
        logger.warning(
            "%s: its handler's return value is not kept as its result: %s", job.id, error
        )
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    """What to tell the queue once a handler is done."""

    ack: bool
    result: bytes | None = None
    """An ACK's result: what the handler returned (`job_result`)."""
    delay_ms: int | None = None
    dead: bool = False
    error: BaseException | None = None
    reason: str | None = None
    """The NACK's REASON: `failure_reason(error)`."""


def _outcome(
    error: BaseException | None, result: bytes | None, job: Job, backoff: Backoff
) -> _Outcome:
    if error is None:
        return _Outcome(ack=True, result=result)
    failed = functools.partial(_Outcome, ack=False, error=error, reason=failure_reason(error))
    if isinstance(error, DeadLetter):
        return failed(dead=True)
    if isinstance(error, Retry) and error.delay_ms is not None:
        return failed(delay_ms=error.delay_ms)
    return failed(delay_ms=backoff.delay_ms(job.nacks))


def _cost(job: Job) -> int:
    """What `job` reports at its ACK: its handler's figure, else its run time
    in ms (at least 1), less what its renewals reported."""
    total = min(MAX_COST, max(1, round(job.ran_for * 1000)))
    if job.cost is not None:
        try:
            total = check_int("cost", job.cost, 0, MAX_COST)
        except (TypeError, ValueError) as error:
            # A bad figure must not stop the ACK: the measured time stands in.
            logger.warning("%s: job.cost ignored (%s); its run time is reported", job.id, error)
    return max(0, total - job.reported_ms)


def _unreported_ms(job: Job, now: float) -> int:
    """The run time of a running `job` its renewals have not reported yet."""
    ran_ms = round((now - job.started) * 1000)
    return min(MAX_COST, max(0, ran_ms - job.reported_ms))


def _key(lease: Fenced) -> tuple[str, str]:
    return (lease.id, lease.token)


class _Dispatch:
    """The dispatcher's state and decisions, without I/O: what the next round
    trip sends (`plan`), what its replies mean (`absorb`), how long to wait
    until something is due (`nap`). The threaded and the asyncio loops of
    `Worker` only carry them out.
    """

    def __init__(self, worker: Worker, wake: Callable[[], None]) -> None:
        self.worker = worker
        self.wake = wake
        self.running: dict[tuple[str, str], Job] = {}
        # Finished handlers, from their threads or tasks: each one's error, or its result.
        self._finished: list[tuple[Job, BaseException | None, bytes | None]] = []
        self._lock = threading.Lock()
        # Outcomes decided and not yet confirmed by the server (a failed
        # round trip sends them again).
        self._settling: list[tuple[Job, _Outcome]] = []
        self._next_renew = 0.0
        self._idle_until = 0.0
        # A moving average of handlers' run times, in seconds.
        self._mean_run = 1.0
        self.closed = False

    def finished(self, job: Job, error: BaseException | None, value: object) -> None:
        """A handler ended (any thread), raising `error` or returning `value`:
        its outcome goes in the next round trip."""
        job.ran_for = time.monotonic() - job.started
        # Encoded here, in the handler's thread or task, not by the dispatcher.
        result = None if error is not None else _kept_result(job, value)
        with self._lock:
            if self.closed:
                return
            self._finished.append((job, error, result))
        self.wake()

    def handlers_are_quick(self) -> bool:
        """Whether handlers finish in less than a round trip: waiting a moment
        for them batches their settling (no-op and tiny jobs); for slower ones
        it would only delay refilling the slots that are free."""
        return self._mean_run < QUICK_HANDLER_SECONDS

    def _free(self) -> int:
        return self.worker.concurrency - len(self.running) + len(self._settling)

    def plan(self, now: float, leasing: bool) -> Exchange | None:
        """The next round trip, or None when nothing is due."""
        with self._lock:
            finished, self._finished = self._finished, []
        for job, error, result in finished:
            self._mean_run += (job.ran_for - self._mean_run) / 16
            if job.lost.is_set():
                self.running.pop(_key(job.lease), None)
                self._report_lost(job)
            else:
                self._settling.append((job, _outcome(error, result, job, self.worker.backoff)))
        acks = tuple(job.lease for job, outcome in self._settling if outcome.ack)
        costs = (
            tuple(_cost(job) for job, outcome in self._settling if outcome.ack)
            if self.worker.cost is not None
            else None
        )
        results = tuple(outcome.result for _, outcome in self._settling if outcome.ack)
        kept = None if all(result is None for result in results) else results
        nacks = tuple(
            GiveBack(job.lease, outcome.delay_ms, outcome.dead, reason=outcome.reason)
            for job, outcome in self._settling
            if not outcome.ack
        )
        renews: tuple[Fenced, ...] = ()
        renew_costs = None
        if now >= self._next_renew:
            settling = {_key(job.lease) for job, _ in self._settling}
            running = [job for key, job in self.running.items() if key not in settling]
            renews = tuple(job.lease for job in running)
            if self.worker.cost is not None:
                # A long job is charged as it runs: its run time so far.
                renew_costs = tuple(_unreported_ms(job, now) for job in running)
            self._next_renew = now + self.worker.lease_ms / 3000
        # Nothing running: wait in the server. Else ask again only with
        # something to settle, or once the queue may have filled.
        may_ask = not self.running or self._settling or now >= self._idle_until
        count = max(0, self._free()) if leasing and may_ask else 0
        block_ms = self.worker.block_ms if count and not self.running else None
        sent = Exchange(
            self.worker.lease_ms, acks, nacks, renews, count, block_ms, costs, renew_costs, kept
        )
        return None if sent.is_empty() else sent

    def absorb(self, sent: Exchange, got: Exchanged, now: float) -> list[Job]:
        """Reads a round trip's replies; the jobs it leased, to start."""
        acked, nacked = iter(got.acked), iter(got.nacked)
        for job, outcome in self._settling:
            self.running.pop(_key(job.lease), None)
            self._report(job, outcome, next(acked) if outcome.ack else next(nacked))
        self._settling = []
        for lease, renewed, cost in zip(
            sent.renews, got.renewed, sent.renew_costs_each(), strict=True
        ):
            holder = self.running.get(_key(lease))
            # None: not asked (its node out of reach); the next renewal asks.
            if renewed is False and holder is not None:
                holder.lost.set()
            if renewed and holder is not None and cost is not None:
                holder.reported_ms += cost
        if sent.count and len(got.leases) < sent.count:
            self._idle_until = now + IDLE_POLL_SECONDS
        jobs = [Job(lease, self.worker.queue.name) for lease in got.leases]
        for job in jobs:
            self.running[_key(job.lease)] = job
            _call_hook(self.worker.hooks.leased, job)
        return jobs

    def failed(self, now: float) -> None:
        """A round trip raised: settle again next time, renew at once."""
        self._next_renew = now

    def nap(self, now: float, leasing: bool) -> float:
        """How long to wait for a finished handler before planning again."""
        due = [self._next_renew - now] if self.running else []
        if leasing and self._free() > 0 and self.running:
            due.append(self._idle_until - now)
        return max(0.0, min([*due, LONGEST_NAP_SECONDS]))

    def close(self) -> Exchange | None:
        """Shutdown's last round trip: settle what finished, give the rest back unrun."""
        plan = self.plan(time.monotonic(), leasing=False)
        with self._lock:
            self.closed = True
        settling = {_key(job.lease) for job, _ in self._settling}
        abandoned = [job for key, job in self.running.items() if key not in settling]
        for job in abandoned:
            logger.warning("stopping: %s goes back to the queue unrun", job.id)
            job.cancelled.set()
            del self.running[_key(job.lease)]
        releases = tuple(GiveBack(job.lease, release=True) for job in abandoned)
        if plan is None and not releases:
            return None
        base = plan or Exchange(self.worker.lease_ms)
        return dataclasses.replace(base, nacks=base.nacks + releases, renews=())

    def _report(self, job: Job, outcome: _Outcome, settled: bool | NackOutcome | None) -> None:
        """`settled`: ACK's True, or where NACK sent the item; falsy when the lease was lost."""
        took = job.ran_for
        if not settled:
            job.lost.set()
            self._report_lost(job)
        elif outcome.error is None:
            logger.info("%s done in %.3f s", job.id, took)
            _call_hook(self.worker.hooks.succeeded, job, took)
        elif settled is NackOutcome.DEAD:
            why = "dead-lettered" if outcome.dead else "dead-lettered by the queue's MAX-NACKS"
            logger.error(
                "%s (partition %s) failed after %.3f s (%r): %s",
                job.id,
                job.partition,
                took,
                outcome.error,
                why,
                exc_info=outcome.error,
            )
            _call_hook(self.worker.hooks.failed, job, outcome.error, None)
        else:
            logger.warning(
                "%s (partition %s) failed after %.3f s (%r): retry in %s ms",
                job.id,
                job.partition,
                took,
                outcome.error,
                outcome.delay_ms,
                exc_info=outcome.error,
            )
            _call_hook(self.worker.hooks.failed, job, outcome.error, outcome.delay_ms)

    def _report_lost(self, job: Job) -> None:
        logger.warning("lease of %s was lost: not acked", job.id)
        _call_hook(self.worker.hooks.lost, job)


class _Reachability:
    """A server that cannot be reached: a capped backoff, and one log line per change."""

    def __init__(self, queue_name: str) -> None:
        self.queue_name = queue_name
        self.pause = 0.0

    def failed(self, error: Exception) -> float:
        if self.pause == 0.0:
            logger.error("queue %s: %s; retrying with backoff", self.queue_name, error)
        self.pause = min(5.0, max(0.1, self.pause * 2))
        return self.pause

    def ok(self) -> None:
        if self.pause:
            logger.warning("queue %s: reachable again", self.queue_name)
            self.pause = 0.0


def _own_connection[Q](queue: Q) -> tuple[Q, Any]:
    """The dispatcher's own connection, held for its life.

    Over a plain `redis.Redis`, each call borrows a connection from the
    pool and checks it (three system calls and an exception per round trip:
    a tenth of the dispatcher's CPU per job); the dispatcher, the only one
    to talk to the server, keeps one instead. The second value is the client
    to close at the end (None when the queue is used as it is: a cluster, a
    client that already holds one connection, a server not reachable yet).
    """
    client = getattr(queue, "client", None)
    try:
        if isinstance(queue, Queue) and type(client) is redis.Redis and client.connection is None:
            own = redis.Redis(connection_pool=client.connection_pool, single_connection_client=True)
            return cast(Q, Queue(own, queue.name, retry_seconds=queue.retry_seconds)), own
        if isinstance(queue, AsyncQueue) and type(client) is redis.asyncio.Redis:
            if client.single_connection_client:
                return queue, None
            owned = redis.asyncio.Redis(
                connection_pool=client.connection_pool, single_connection_client=True
            )
            return cast(Q, AsyncQueue(owned, queue.name, retry_seconds=queue.retry_seconds)), owned
    except (redis.exceptions.RedisError, OSError):
        pass
    return queue, None


Handler = Callable[[Job], object]
AsyncHandler = Callable[[Job], Awaitable[object]]


# What the dispatcher's loop (`Worker._rounds`) asks its runner to do next.
@dataclasses.dataclass(frozen=True, slots=True)
class _Send:
    """Send this round trip; reply with what it got."""

    sent: Exchange


@dataclasses.dataclass(frozen=True, slots=True)
class _Wait:
    """Wait this long: for a finished handler (`woken`) or stop(), or as a backoff."""

    seconds: float
    woken: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Start:
    """Hand these jobs to handlers."""

    jobs: list[Job]


class _Probe:
    """Read the queue's stats (the start-up line; a server without the module fails here)."""


_PROBE = _Probe()
# A wait of nothing: lets handlers about to finish do so first.
_YIELD = _Wait(0.0, woken=False)
_Step = _Send | _Wait | _Start | _Probe


class Worker:
    """Runs `handler(job)` on the items of `queue`, `concurrency` at a time.

    A plain function runs in `concurrency` threads over a `Queue` (or a
    `ShardedQueue`: the same worker across sub-queues, by its weighted
    rotation); a coroutine function runs as that many asyncio tasks over an
    `AsyncQueue` (`run()` starts the event loop; `await run_async()` inside
    one). Either way one dispatcher talks to the server.

    `cost="time"`: each job that returns is charged to its partition what
    it really cost instead of the weight it was queued with (`VTRR.ACKCOST`
    in the same round trip): its handler's run time in milliseconds, or
    the figure the handler set on `job.cost`. A long job is charged as it
    runs: each renewal reports its run time since the last (`RENEW ...
    COST`), and the ACK the rest. So a tenant whose jobs run ten times
    longer than their weights say gets a tenth of the service.

    A handler's return value, unless None, is its job's result (see
    `job_result`), sent with its ACK (`ACKRESULT`) and kept while the
    queue's policy keeps outcomes (`set_policy(result_ttl_ms=...)`):
    `queue.result(id)` reads it. A job that returns one is acked with it
    and reports no cost (the module's ACKRESULT takes none): it is charged
    its weight, and what its renewals reported.
    """

    def __init__(
        self,
        queue: Exchanging | AsyncQueue,
        handler: Handler | AsyncHandler,
        *,
        concurrency: int = 1,
        lease_ms: int = 30_000,
        block_ms: int = 1_000,
        backoff: Backoff | None = None,
        grace_seconds: float = 30.0,
        hooks: Hooks | None = None,
        exit_when_idle: bool = False,
        cost: Literal["time"] | None = None,
    ) -> None:
        check_int("concurrency", concurrency, 1, 100_000)
        check_int("lease_ms", lease_ms, 3, MAX_MS)  # renewed every third
        # Positive: between two waits the dispatcher sees stop() (BLOCK 0 waits forever).
        check_int("block_ms", block_ms, 1, MAX_BLOCK_MS)
        if grace_seconds < 0:
            raise ValueError("grace_seconds must not be negative")
        if cost not in (None, "time"):
            raise ValueError(f"cost must be None or 'time', not {cost!r}")
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
        self.cost = cost
        self.stopping = threading.Event()
        self._grace_over = threading.Event()

    def stop(self, *, at_once: bool = False) -> None:
        """Stop leasing; `run()` returns once the running handlers finish (or the grace ends).

        `at_once`: end the grace now: the running jobs' items go back unrun.
        """
        if at_once:
            self._grace_over.set()
        self.stopping.set()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if self.stopping.is_set():
                logger.warning("signal %s again: stopping now, running jobs go back unrun", name)
                self.stop(at_once=True)
                return
            logger.info(
                "signal %s: stopping (grace %.1f s; a second signal stops at once)",
                name,
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

    def _banner(self, stats: Any) -> None:
        """The start-up line: where, which queue and layout, how many at once."""
        logger.info(
            "vtrr worker: queue %s (layout %s) on %s, concurrency %d (%s), lease %d ms",
            self.queue.name,
            getattr(stats, "layout", "unknown" if stats is None else "per sub-queue"),
            server_of(getattr(self.queue, "client", None)),
            self.concurrency,
            "asyncio tasks" if self.is_async else "threads",
            self.lease_ms,
        )

    def _rounds(
        self, dispatch: _Dispatch, queue_name: str, clear_woken: Callable[[], None]
    ) -> Generator[_Step, Any, None]:
        """The dispatcher's loop, without I/O: each step says what its runner (the
        threads or the asyncio tasks) does next, and the runner sends back the
        reply of a call (`_PROBE`: the stats; `_Send`: the round trip) or throws
        its transient error in. It ends when stopping and nothing runs (or the
        grace is over), or, with `exit_when_idle`, when a lease finds nothing and
        nothing runs.
        """
        reach = _Reachability(queue_name)
        # A server without the module says so here, at once (the runner raises
        # permanent errors); one that cannot be reached yet is the loop's to retry.
        try:
            stats = yield _PROBE
        except (redis.exceptions.RedisError, OSError):
            stats = None
        self._banner(stats)
        deadline: float | None = None
        while True:
            now = time.monotonic()
            if self.stopping.is_set() and deadline is None:
                deadline = now + self.grace_seconds
            if self._grace_over.is_set():
                deadline = now
            if deadline is not None and (not dispatch.running or now >= deadline):
                return
            leasing = deadline is None
            if dispatch.handlers_are_quick():
                # Let handlers about to finish do so first (yield the GIL or
                # the event loop): one round trip then settles and refills more.
                yield _YIELD
            clear_woken()
            sent = dispatch.plan(now, leasing)
            if sent is None:
                yield _Wait(dispatch.nap(now, leasing), woken=True)
                continue
            try:
                got = yield _Send(sent)
            except (redis.exceptions.RedisError, OSError) as error:
                dispatch.failed(now)
                yield _Wait(reach.failed(error), woken=False)
                continue
            reach.ok()
            if self.stopping.is_set() and got.leases:
                # Leased by a round trip under way when stop() came: never started.
                unrun, got = got.leases, dataclasses.replace(got, leases=[])
                dispatch.absorb(sent, got, time.monotonic())
                for lease in unrun:
                    logger.warning("stopping: %s goes back to the queue unrun", lease.id)
                releases = tuple(GiveBack(lease, release=True) for lease in unrun)
                try:
                    yield _Send(Exchange(self.lease_ms, nacks=releases))
                except (redis.exceptions.RedisError, OSError) as error:
                    logger.warning("giving them back failed (%s): their leases will expire", error)
                continue
            yield _Start(dispatch.absorb(sent, got, time.monotonic()))
            if self.exit_when_idle and sent.count > 0 and not got.leases and not dispatch.running:
                return

    # Threads.
    def _run_threads(self) -> None:
        assert not isinstance(self.queue, AsyncQueue)
        queue, own = _own_connection(self.queue)
        woken = threading.Event()
        dispatch = _Dispatch(self, woken.set)
        jobs: queue_module.SimpleQueue[Job | None] = queue_module.SimpleQueue()
        for i in range(self.concurrency):
            threading.Thread(
                target=self._handler_thread, args=(jobs, dispatch), name=f"vtrr-worker-{i}",
                daemon=True,
            ).start()  # fmt: skip
        rounds = self._rounds(dispatch, queue.name, woken.clear)
        try:
            step = next(rounds)
            while True:
                if isinstance(step, _Start):
                    for job in step.jobs:
                        jobs.put(job)
                    step = next(rounds)
                elif isinstance(step, _Wait):
                    if step.woken:
                        woken.wait(step.seconds)
                    elif step.seconds:
                        self.stopping.wait(step.seconds)
                    else:
                        time.sleep(0)
                    step = next(rounds)
                else:
                    try:
                        reply = (
                            queue.exchange(step.sent) if isinstance(step, _Send) else queue.stats()
                        )
                    except PERMANENT:
                        raise
                    except (redis.exceptions.RedisError, OSError) as error:
                        step = rounds.throw(error)
                        continue
                    step = rounds.send(reply)
        except StopIteration:
            pass
        finally:
            last = dispatch.close()
            if last is not None:
                try:
                    dispatch.absorb(last, queue.exchange(last), time.monotonic())
                except Exception:
                    logger.exception("the last round trip failed; its leases will expire")
            for _ in range(self.concurrency):
                jobs.put(None)
            if own is not None:
                own.close()

    def _handler_thread(
        self, jobs: queue_module.SimpleQueue[Job | None], dispatch: _Dispatch
    ) -> None:
        handler: Handler = self.handler
        while (job := jobs.get()) is not None:
            job.started = time.monotonic()
            error: BaseException | None = None
            value: object = None
            try:
                value = handler(job)
            except BaseException as raised:  # SystemExit included: a handler never ends the worker
                error = raised
            dispatch.finished(job, error, value)

    # Asyncio tasks.
    async def run_async(self) -> None:
        """The asyncio form of `run()` (no signal handlers: the caller's loop owns those)."""
        assert isinstance(self.queue, AsyncQueue)
        queue, own = _own_connection(self.queue)
        woken = asyncio.Event()
        dispatch = _Dispatch(self, woken.set)
        tasks: set[asyncio.Task[None]] = set()
        rounds = self._rounds(dispatch, queue.name, woken.clear)
        try:
            step = next(rounds)
            while True:
                if isinstance(step, _Start):
                    for job in step.jobs:
                        task = asyncio.create_task(self._handler_task(job, dispatch))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                    step = next(rounds)
                elif isinstance(step, _Wait):
                    if step.woken:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(woken.wait(), step.seconds)
                    else:
                        await asyncio.sleep(step.seconds)
                    step = next(rounds)
                else:
                    try:
                        reply = await (
                            queue.exchange(step.sent) if isinstance(step, _Send) else queue.stats()
                        )
                    except PERMANENT:
                        raise
                    except (redis.exceptions.RedisError, OSError) as error:
                        step = rounds.throw(error)
                        continue
                    step = rounds.send(reply)
        except StopIteration:
            pass
        finally:
            last = dispatch.close()
            for task in tasks:
                task.cancel()
            if last is not None:
                try:
                    dispatch.absorb(last, await queue.exchange(last), time.monotonic())
                except Exception:
                    logger.exception("the last round trip failed; its leases will expire")
            if own is not None:
                await own.aclose()

    async def _handler_task(self, job: Job, dispatch: _Dispatch) -> None:
        handler: AsyncHandler = self.handler  # type: ignore[assignment]
        job.started = time.monotonic()
        error: BaseException | None = None
        value: object = None
        try:
            value = await handler(job)
        except BaseException as raised:  # CancelledError too: the job is settled either way
            error = raised
        dispatch.finished(job, error, value)
