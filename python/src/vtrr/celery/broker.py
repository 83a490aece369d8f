"""The triggers in Celery's broker: how many wait (read from kombu's Redis keys), and
sending more, as vtrr-queue does (a trigger carries no item, only the wake-up)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis

logger = logging.getLogger("vtrr.celery")


class Triggers:
    """The trigger messages of one `VTRRQueue` in a Redis broker (counted; other brokers: 0)."""

    def __init__(self, celery_app: Any, celery_queue: str, name: str, max_concurrency: int) -> None:
        self._celery_app = celery_app
        self.celery_queue = celery_queue
        self.name = name
        self.max_concurrency = max_concurrency
        self._broker = self._connect()

    def _connect(self) -> redis.Redis | None:
        try:
            url = self._celery_app.conf.broker_url
            if isinstance(url, list | tuple):
                url = url[0] if url else None
            if isinstance(url, str):
                url = url.split(";")[0].strip()
            if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
                logger.info(
                    "vtrr %s: the Celery broker is not Redis (%r): triggers in it are not counted",
                    self.name,
                    url,
                )
                return None
            return redis.Redis.from_url(url)
        except Exception as error:
            logger.warning("vtrr %s: could not connect to the Celery broker: %s", self.name, error)
            return None

    def keys(self) -> list[str]:
        """The broker lists holding this celery_queue's messages, one per priority step.

        Kombu's Redis transport keeps priority p > 0 in `<queue><sep><p>`
        (sep `\\x06\\x16` unless `broker_transport_options` says otherwise),
        all behind `global_keyprefix`.
        """
        options = self._celery_app.conf.broker_transport_options or {}
        sep = str(options.get("sep", "\x06\x16"))
        steps = options.get("priority_steps") or (0, 3, 6, 9)
        prefix = str(options.get("global_keyprefix", "") or "")
        queue = prefix + self.celery_queue
        return [queue if step == 0 else f"{queue}{sep}{step}" for step in steps]

    def waiting(self) -> int:
        """Triggers waiting in the broker (not those a worker already reserved).

        0 on any error, so the caller may over-schedule slightly: safe, a
        surplus trigger finds nothing and ends.
        """
        if self._broker is None:
            return 0
        try:
            pipe = self._broker.pipeline(transaction=False)
            for key in self.keys():
                pipe.llen(key)
            return sum(int(n) for n in pipe.execute())
        except Exception as error:
            logger.error("vtrr %s: could not count triggers in the broker: %s", self.name, error)
            return 0

    def send(self, celery_task: Any, num_tasks: int) -> int:
        """Send min(max_concurrency - triggers in the broker, num_tasks) triggers."""
        if celery_task is None or num_tasks <= 0:
            return 0
        to_schedule = min(self.max_concurrency - self.waiting(), num_tasks)
        for _ in range(to_schedule):
            celery_task.apply_async(queue=self.celery_queue)
        return max(0, to_schedule)

    def chain(self, trigger: Any, leasable: Callable[[], int]) -> None:
        """One more trigger if items wait: vtrr-queue's chain (a run ended, one is sent).

        Not when the triggers already in the broker outnumber the waiting
        items: each of those leases one of them anyway.
        """
        try:
            waiting = leasable()
            if waiting > 0 and waiting > self.waiting():
                trigger.apply_async(queue=self.celery_queue)
        except Exception:
            logger.exception("vtrr %s: could not schedule the next trigger", self.name)
