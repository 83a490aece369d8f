"""RQ's runner for `make bench-e2e` (the `.bench/peers` venv): `fill` or `work`.

`fill` enqueues E2E_JOBS jobs calling `rq_runner.noop` with a payload of
E2E_PAYLOAD_BYTES (`enqueue_many`, 1,000 a pipeline), each with
`result_ttl=0`: a finished job is deleted, as vtrr's ACK and BullMQ's
`removeOnComplete` do. `work` runs one `SimpleWorker` (jobs run in the
worker process, no fork per job) in burst mode: it ends when the queue is
empty. RQ runs one job at a time per worker process, so E2E_CONCURRENCY
is not used. A job counts as settled once its success is recorded.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from common import QUEUE, Probe, Settings, count_redis_py
from redis import Redis
from rq import Queue, SimpleWorker

settings = Settings.from_env()
PAUSE = settings.sleep_ms / 1000
probe: Probe | None = None


def noop(payload: str) -> None:
    assert probe is not None
    probe.start()
    if PAUSE:
        time.sleep(PAUSE)


class MeasuredWorker(SimpleWorker):
    def handle_job_success(self, *args: Any, **kwargs: Any) -> Any:
        result = super().handle_job_success(*args, **kwargs)
        assert probe is not None
        probe.settle()
        return result


def fill() -> None:
    connection = Redis(port=settings.port)
    queue = Queue(QUEUE, connection=connection)
    payload = settings.payload
    for start in range(0, settings.total, 1000):
        count = min(1000, settings.total - start)
        with connection.pipeline() as pipe:
            queue.enqueue_many(
                [
                    Queue.prepare_data("rq_runner.noop", args=(payload,), result_ttl=0)
                    for _ in range(count)
                ],
                pipeline=pipe,
            )
            pipe.execute()


def work() -> None:
    global probe
    probe = Probe(settings.jobs, settings.warmup)
    count_redis_py(probe)
    connection = Redis(port=settings.port)
    MeasuredWorker([Queue(QUEUE, connection=connection)], connection=connection).work(
        burst=True, logging_level="WARNING"
    )


def main(mode: str) -> None:
    {"fill": fill, "work": work}[mode]()


if __name__ == "__main__":
    # Run as the module `rq_runner`, the name the jobs call (`rq_runner.noop`),
    # so the worker's job function and its probe are one module's.
    import rq_runner

    rq_runner.main(sys.argv[1])
