"""Worker processes killed with SIGKILL in a loop, and the server killed and restarted
from its AOF (`appendfsync always`), under load: every job is done at least once, and a
second run happens only where a kill explains it.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import vtrr
from vtrr import Item

HERE = Path(__file__).resolve().parent
JOBS = 2000


def test_kill_9_workers_and_the_server_in_a_loop_loses_nothing(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(
        "reclaim-interval-ms", "50",
        extra=("--appendonly", "yes", "--appendfsync", "always"),
    )  # fmt: skip
    name = "{reliable}"
    client = server.client()
    queue = vtrr.Queue(client, name)
    queue.enqueue_many(Item(f"p{i % 10}", f"job-{i}", b"") for i in range(JOBS))
    env = {**os.environ, "VTRR_URL": server.url, "PYTHONPATH": str(HERE)}

    def spawn() -> subprocess.Popen[bytes]:
        # Leases of 3 s, renewed every second: a live worker that a loaded machine
        # stalls for a moment keeps its leases (a run again would be unexplained).
        command = [sys.executable, "-m", "vtrr.cli", "--url", server.url, "worker",
                   "jobs:record_pid", "--queue", name, "--concurrency", "4",
                   "--lease-ms", "3000", "--block-ms", "100"]  # fmt: skip
        return subprocess.Popen(command, env=env, cwd=HERE, stderr=subprocess.DEVNULL)

    rng = random.Random(os.environ.get("VTRR_SEED"))
    workers = [spawn(), spawn()]
    killed: set[int] = set()
    restarts: list[int] = []  # how many runs were recorded before each server restart
    try:
        for round_ in range(12):
            time.sleep(rng.uniform(0.1, 0.3))
            victim = workers.pop(rng.randrange(len(workers)))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed.add(victim.pid)
            workers.append(spawn())
            if round_ in (4, 9):
                restarts.append(len(server.client().lrange(f"done:{name}", 0, -1)))
                server.kill_and_restart()
        deadline = time.monotonic() + 60
        while True:
            stats = vtrr.Queue(server.client(), name).stats()
            if stats.queued + stats.inflight + stats.delayed == 0:
                break
            assert time.monotonic() < deadline, f"never drained: {stats}"
            time.sleep(0.1)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    queue = vtrr.Queue(server.client(), name)
    runs = [entry.decode().split(":") for entry in server.client().lrange(f"done:{name}", 0, -1)]
    by_job: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for position, (job, pid) in enumerate(runs):
        by_job[job].append((position, int(pid)))
    assert restarts[-1] < JOBS, "the kills came while jobs were still running"
    assert set(by_job) == {f"job-{i}" for i in range(JOBS)}, "every job ran"
    for job, seen in by_job.items():
        for (position, pid), _ in itertools.pairwise(seen):
            # An earlier run's ACK can be lost only if its worker was killed,
            # or the server went down, after the run recorded itself.
            explained = pid in killed or any(position < before for before in restarts)
            assert explained, f"{job} ran again though nothing killed its first run: {seen}"
    assert queue.check() == []
    stats = queue.stats()
    assert (stats.queued, stats.inflight, stats.delayed, stats.dead) == (0, 0, 0, 0)
    doubled = sum(len(seen) - 1 for seen in by_job.values())
    print(f"{len(runs)} runs of {JOBS} jobs; {doubled} second runs, all explained by a kill")
