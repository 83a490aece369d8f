"""`Heartbeat`: renews leases while the code that holds them runs (Celery's and Django's tasks).

The `Worker` renews its own leases in its dispatcher's round trips; the
framework integrations, whose worker loops are the framework's, track
each lease here instead.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from types import TracebackType
from typing import Any, Protocol, Self

import redis.exceptions

from .types import Fenced

logger = logging.getLogger("vtrr.heartbeat")


class Renewing(Protocol):
    """What a Heartbeat needs of a queue."""

    def renew(self, lease: Any, lease_ms: int) -> bool: ...


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
        for n, (lease, lost) in enumerate(tracked):
            try:
                renewed = self.queue.renew(lease, self.lease_ms)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
                # One queue, one node: the other leases' RENEWs would fail the
                # same way, each after the client's own retries. The next pass asks again.
                logger.warning(
                    "RENEW of %s failed (%s): %d leases not renewed this pass, tried again in %.1f s",
                    lease.id,
                    error,
                    len(tracked) - n,
                    self.lease_ms / 3000,
                )
                return
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
