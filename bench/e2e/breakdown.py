"""Where a vtrr worker's CPU goes (`run.py --profile`): a small deterministic profiler.

The dispatcher thread's own CPU clock (`time.thread_time_ns`, which does not
run while the thread waits) is read around the steps of a round trip; each
thread's whole CPU comes from /proc/self/task/<tid>/schedstat. Steps nest
(`Queue.run` holds `Redis.execute_command`, which holds the pool, send and
read steps): the report prints them as a tree with what each leaves
unaccounted. Reading the clock costs about a microsecond a call: the figures
run a little above an unprofiled run's, which the report gives beside them.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

spent: defaultdict[str, int] = defaultdict(int)
calls: defaultdict[str, int] = defaultdict(int)
_dispatcher = threading.main_thread().ident


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != _dispatcher:
            return function(*args, **kwargs)
        start = time.thread_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.thread_time_ns() - start
            calls[name] += 1

    return timed


def install() -> None:
    """Wraps the steps of the dispatcher's round trip (before the Worker is built)."""
    import redis
    import redis.connection
    from vtrr import client, exchange, worker

    targets = [
        (worker._Dispatch, "plan", "_Dispatch.plan: what to send"),
        (worker._Dispatch, "absorb", "_Dispatch.absorb: replies to Jobs, hooks"),
        (client.Queue, "run", "Queue.run: one command, its reply parsed"),
        (redis.Redis, "execute_command", "redis-py execute_command"),
        (
            redis.connection.ConnectionPool,
            "get_connection",
            "pool: get_connection (can_read check)",
        ),
        (redis.connection.ConnectionPool, "release", "pool: release"),
        (redis.connection.AbstractConnection, "send_command", "send_command: pack, sendall"),
        (redis.connection.AbstractConnection, "read_response", "read_response: recv, RESP3 parse"),
    ]
    for owner, attribute, name in targets:
        setattr(owner, attribute, _timed(name, getattr(owner, attribute)))
    # Queue.exchange calls it through the module.
    exchange.commands_of = _timed("exchange.commands_of: Command objects", exchange.commands_of)


def threads_cpu_ns() -> dict[str, int]:
    """Each live thread's CPU so far, by thread name."""
    out: dict[str, int] = {}
    for thread in threading.enumerate():
        path = Path(f"/proc/self/task/{thread.native_id}/schedstat")
        try:
            out[thread.name] = int(path.read_text().split()[0])
        except OSError:
            continue
    return out


def result(before: dict[str, int], jobs: int) -> dict[str, Any]:
    after = threads_cpu_ns()
    per_thread = {name: (after[name] - before.get(name, 0)) / jobs / 1000 for name in after}
    return {
        "threads_us": per_thread,
        "steps_us": {name: value / jobs / 1000 for name, value in spent.items()},
        "calls_per_job": {name: count / jobs for name, count in calls.items()},
    }
