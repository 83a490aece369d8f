"""vtrr's runner for `make bench-e2e` (the package's venv): `fill` or `work`.

`fill` queues E2E_JOBS items of E2E_PAYLOAD_BYTES over E2E_PARTITIONS
partitions (VTRR.ENQUEUE, 1,000 a call; the driver has set the layout with
`CONFIG SET vtrr.default-layout`). `work` runs `vtrr.Worker` as an
application would (a plain function, threads, default lease and block
times, no logging configured) until every item is acked, counting each
`Queue.exchange` call: one call is one round trip (a pipeline, or a single
command).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import redis
import vtrr
from common import QUEUE, Probe, Settings, count_redis_py


def fill(settings: Settings) -> None:
    queue = vtrr.Queue(redis.Redis(port=settings.port), QUEUE)
    payload = settings.payload.encode()
    batch: list[vtrr.Item] = []
    for i in range(settings.total):
        batch.append(vtrr.Item(f"p{i % settings.partitions}", f"j{i}", payload))
        if len(batch) == 1000:
            queue.enqueue_many(batch)
            batch = []
    if batch:
        queue.enqueue_many(batch)


def work(settings: Settings) -> None:
    probe = Probe(settings.jobs, settings.warmup)
    count_redis_py(probe)
    # run.py --profile: each thread's CPU (and with E2E_STEPS, each step's) to this file.
    breakdown_to = os.environ.get("E2E_BREAKDOWN")
    if breakdown_to:
        import breakdown

        if os.environ.get("E2E_STEPS"):
            breakdown.install()
        threads_before = breakdown.threads_cpu_ns()
    # run.py --profile also tries a client that keeps one connection (no pool check per call).
    single = os.environ.get("E2E_VTRR_CLIENT") == "single"
    client = redis.Redis(port=settings.port, socket_timeout=10, single_connection_client=single)
    queue = vtrr.Queue(client, QUEUE)
    exchange = vtrr.Queue.exchange

    # Counted on the class: the worker's dispatcher runs its own Queue over
    # its own connection.
    def counted_exchange(
        self: vtrr.Queue, sent: vtrr.exchange.Exchange
    ) -> vtrr.exchange.Exchanged:
        probe.exchanges += 1
        return exchange(self, sent)

    vtrr.Queue.exchange = counted_exchange  # type: ignore[method-assign]
    pause = settings.sleep_ms / 1000

    def handle(job: vtrr.Job) -> None:
        probe.start()
        if pause:
            time.sleep(pause)

    def succeeded(job: vtrr.Job, took: float) -> None:
        if probe.settle():
            if breakdown_to:
                found = breakdown.result(threads_before, settings.total)
                Path(breakdown_to).write_text(json.dumps(found))
            worker.stop()

    worker = vtrr.Worker(
        queue, handle, concurrency=settings.concurrency, hooks=vtrr.Hooks(succeeded=succeeded)
    )
    worker.run()


if __name__ == "__main__":
    {"fill": fill, "work": work}[sys.argv[1]](Settings.from_env())
