"""`manage.py vtrr_worker`: run a VTRRBackend's tasks in N threads, with graceful SIGTERM.

It says what it does through the `vtrr.django` logger: when the project's
LOGGING sends the `vtrr` loggers nowhere, to stderr with timestamps (the
format of `vtrr worker`); otherwise as the project says.
"""

from __future__ import annotations

import datetime
import logging
import os
import queue
import signal
import socket
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.tasks.exceptions import InvalidTaskBackend

from vtrr.django.backend import VTRRBackend
from vtrr.worker import LOG_FORMAT

logger = logging.getLogger("vtrr.django")

_ACQUIRE_TIMEOUT = datetime.timedelta(seconds=1)
"""How long one acquire waits: also how soon an idle thread notices a shutdown."""


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Run the tasks of a vtrr.django.VTRRBackend: acquire, execute, acknowledge, in "
        "--concurrency threads. SIGTERM or SIGINT: finish the running tasks, then exit "
        "(a second signal exits at once; those tasks' leases expire and they run again)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-b",
            "--backend",
            default=DEFAULT_TASK_BACKEND_ALIAS,
            help="Alias of the task backend (default: %(default)s).",
        )
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="A queue to run (repeat for several, tried in this order); default: all of the backend's QUEUES.",
        )
        parser.add_argument(
            "-c",
            "--concurrency",
            type=int,
            default=1,
            help="Worker threads (default: %(default)s).",
        )
        parser.add_argument(
            "--exit-empty",
            action="store_true",
            help="A thread exits when it finds no task for a second (deferred tasks not yet due are left).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias: str = options["backend"]
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend as error:
            raise CommandError(f"Invalid backend: {alias!r}") from error
        if not isinstance(backend, VTRRBackend):
            raise CommandError(
                f"Backend {alias!r} is a {type(backend).__name__}, not a vtrr.django.VTRRBackend"
            )
        queues: list[str] = options["queues"] or sorted(backend.queues)
        if unknown := sorted(set(queues) - set(backend.queues)):
            raise CommandError(f"Backend {alias!r} has no queues {unknown!r}")
        concurrency: int = options["concurrency"]
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        exit_empty: bool = options["exit_empty"]
        _log_to_stderr_unless_configured()

        stopping = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if stopping.is_set():
                raise SystemExit(1)
            stopping.set()
            logger.info(
                "%s: finishing the running tasks, then exiting", signal.Signals(signum).name
            )

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        prefix = f"{socket.gethostname()}:{os.getpid()}"
        threads = [
            threading.Thread(
                target=self._work,
                args=(backend, tuple(queues), stopping, exit_empty),
                name=f"{prefix}-{index}",
                daemon=True,
            )
            for index in range(concurrency)
        ]
        logger.info("vtrr_worker: backend %r, queues %s, %d thread(s)", alias, queues, concurrency)
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.1)
        finally:
            backend.close()
        logger.info("vtrr_worker: stopped")

    @staticmethod
    def _work(
        backend: VTRRBackend, queues: tuple[str, ...], stopping: threading.Event, exit_empty: bool
    ) -> None:
        name = threading.current_thread().name
        while not stopping.is_set():
            try:
                task_result = backend.acquire(*queues, timeout=_ACQUIRE_TIMEOUT, worker=name)
            except (queue.Empty, TimeoutError):
                if exit_empty:
                    return
                continue
            except Exception:
                logger.exception("vtrr_worker: acquire failed")
                stopping.wait(1.0)
                continue
            result = backend.execute(task_result)
            try:
                backend.acknowledge(result)
            except Exception:
                # The lease expires and the task runs again.
                logger.exception("vtrr_worker: acknowledge of task %s failed", result.id)


def _log_to_stderr_unless_configured() -> None:
    """Timestamped INFO lines on stderr for the `vtrr` loggers, unless the
    project's LOGGING already sends them (or everything) somewhere."""
    vtrr_logger = logging.getLogger("vtrr")
    if vtrr_logger.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    vtrr_logger.addHandler(handler)
    vtrr_logger.setLevel(logging.INFO)
