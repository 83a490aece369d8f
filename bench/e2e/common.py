"""What the Python runners of `make bench-e2e` share (vtrr's, Celery's, RQ's).

A runner is started by `run.py` twice per measurement: `fill` queues the
jobs, then `work` runs one worker process until the queue is drained. While
working, the runner's `Probe` writes two lines to the file descriptor
`E2E_FD` (inherited from the driver): `first` when the first handler starts
(the driver then reads the server's INFO), and `{"done": {...}}` once the
last job is settled (acked, or its success recorded), with what this
process spent in between: wall seconds, CPU seconds (`RUSAGE_SELF`: every
thread of the process), and the Redis commands and socket writes it sent.
Nothing here decides whether a figure is good: the driver only reports.

Imported by runners in two virtualenvs (the package's and `.bench/peers`),
so it uses the standard library and redis-py only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import threading
import time
from typing import Any

QUEUE = "bench"


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the driver asks for, from the environment."""

    port: int
    jobs: int  # measured
    warmup: int  # settled before the window opens
    concurrency: int
    sleep_ms: float
    partitions: int
    payload_bytes: int

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            port=int(os.environ["E2E_PORT"]),
            jobs=int(os.environ["E2E_JOBS"]),
            warmup=int(os.environ.get("E2E_WARMUP", "0")),
            concurrency=int(os.environ["E2E_CONCURRENCY"]),
            sleep_ms=float(os.environ["E2E_SLEEP_MS"]),
            partitions=int(os.environ["E2E_PARTITIONS"]),
            payload_bytes=int(os.environ["E2E_PAYLOAD_BYTES"]),
        )

    @property
    def total(self) -> int:
        """Jobs to queue: the warm-up's and the measured ones."""
        return self.warmup + self.jobs

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def payload(self) -> str:
        return "x" * self.payload_bytes


class Probe:
    """Marks the first handler's start and the last job's settling, with counters between."""

    def __init__(self, jobs: int, warmup: int = 0) -> None:
        self.jobs = jobs
        self.warmup = warmup
        self.fd = int(os.environ["E2E_FD"])
        self.lock = threading.Lock()
        self.first: dict[str, float] | None = None
        self.settled = 0
        # Counted by the patched client (count_redis_py) and by the vtrr runner.
        self.commands = 0
        self.sends = 0
        self.exchanges = 0

    def start(self) -> None:
        """A handler starts: without a warm-up, the first one opens the measured window."""
        if self.first is not None or self.warmup:
            return
        self._open()

    def _open(self) -> None:
        with self.lock:
            if self.first is not None:
                return
            self.first = self._snapshot()
        os.write(self.fd, b"first\n")

    def settle(self) -> bool:
        """A job is settled; the warm-up's last opens the window, the last job closes it
        (True)."""
        with self.lock:
            self.settled += 1
            settled = self.settled
        if settled == self.warmup:
            self._open()
        last = settled == self.warmup + self.jobs
        if last:
            assert self.first is not None
            end = self._snapshot()
            spent = {key: end[key] - self.first[key] for key in end}
            os.write(self.fd, (json.dumps({"done": spent}) + "\n").encode())
        return last

    def _snapshot(self) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "seconds": time.monotonic(),
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "commands": self.commands,
            "sends": self.sends,
            "exchanges": self.exchanges,
        }


def count_redis_py(probe: Probe) -> None:
    """Counts what redis-py sends: commands (a pipeline's each) and socket writes (a
    pipeline is one). Every Python runner is patched the same way (a counter
    increment per call, well under a microsecond)."""
    from redis.connection import AbstractConnection

    send_command = AbstractConnection.send_command
    pack_commands = AbstractConnection.pack_commands
    send_packed_command = AbstractConnection.send_packed_command

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        probe.commands += 1
        return send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        probe.commands += len(commands)
        return pack_commands(self, commands)

    def counted_send_packed_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        probe.sends += 1
        return send_packed_command(self, *args, **kwargs)

    AbstractConnection.send_command = counted_send_command  # type: ignore[method-assign]
    AbstractConnection.pack_commands = counted_pack_commands  # type: ignore[method-assign]
    AbstractConnection.send_packed_command = counted_send_packed_command  # type: ignore[method-assign]
