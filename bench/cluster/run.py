"""`make bench-cluster`: one tenant population over a 3-master Redis Cluster on loopback.

Scale out on an existing engine (issue #47): a `vtrr.ShardedQueue`'s K = 3
sub-queues `{name:0}`, `{name:1}`, `{name:2}`, one per master, holding
CLUSTER_TENANTS tenants (1,000,000) of one item each, against the same
tenants in one queue on one standalone master. Everything runs on this
machine: the four redis-servers (Redis 7.0, the release module, no
persistence, no replicas) pinned to CPU 0, the worker processes and this
driver to CPU 1 (taskset, as `make bench-e2e` does; CLUSTER_PIN=0 leaves
them to the scheduler). What is measured:

1. **Fill.** Every tenant's item, 64-byte payload (the job's id first, in
   the ShardedQueue's envelope), sent as VTRR.ENQUEUE of 1,000 items,
   pipelined five calls at a time, one thread per master; the wall time and
   each master's `INFO cpu` over it. Also the time of one full read of one
   sub-queue's VTRR.PARTITIONS (what a ShardedQueue's rotation read every 16
   leases to weigh the sub-queues, O(partitions)) and of its VTRR.STATS
   `queued-partitions` (what it reads now, O(1)).
2. **Throughput, workers per shard.** CLUSTER_WORKERS (1) worker process
   per sub-queue, each a `vtrr.Worker` (concurrency 8, a no-op handler)
   over a `vtrr.Queue` of its one sub-queue through a `redis.RedisCluster`
   client, against the same number of worker processes in all over the
   standalone master's one queue, and one worker process alone on it (one
   shard's cost with nothing beside it). Per-sub-queue workers and not
   `vtrr.Worker(ShardedQueue)`, so each shard's figures are its own; the
   fairness part below runs ShardedQueue workers. Each worker settles
   CLUSTER_WARMUP (2,000) jobs, then its share of CLUSTER_JOBS (60,000 per
   round in all); per master, the window runs from its first worker's
   warm-up end to its last worker's last job: jobs/s, `INFO cpu` µs per
   job, how busy the master was (CPU seconds / wall seconds), and the
   workers' own CPU per job (RUSAGE_SELF over their windows). Total: all
   measured jobs / (the last window's end − the first's start). Rounds
   (ROUNDS, 3) interleave the cluster and the standalone master; the report
   gives medians (min–max). With CLUSTER_LAYOUTS=keys,native (the default)
   every queue is then converted (VTRR.CONVERT, timed) to the native layout
   for the same rounds, and back to keys.
3. **Fairness across shards.** CLUSTER_WHALES (30) whales of
   CLUSTER_WHALE_ITEMS (6,000) items each in a fresh sharded queue (whales
   in every sub-queue), drained by three worker processes; once they are
   warm, CLUSTER_ARRIVALS (5) light tenants arrive 0.5 s apart, each with 10
   items. For each: the wait from sending its ENQUEUE to its first item's
   lease (the `leased` hook, in lease order), the items its sub-queue and
   all sub-queues leased after the ENQUEUE's reply and before that lease,
   and per item after the first. Three
   ways: a worker per sub-queue, three ShardedQueue workers (the weighted
   rotation), and the same whales in one queue on the standalone master.
   The single-queue bound (docs/scaling.md, the README): the first item is
   served before more than 2·P items of the P other partitions; for a
   sub-queue P is its own whales.
4. **Live reshard.** A worker per sub-queue drains everything left of the
   tenants (keys layout); after CLUSTER_RESHARD_AFTER (1.5) s one
   sub-queue's slot moves to the master of another (CLUSTER SETSLOT
   IMPORTING/MIGRATING, MIGRATE of each key of the slot, SETSLOT NODE on
   every master: the legacy reshard tests/cluster.rs runs). Its duration,
   each MIGRATE's, and the jobs/s before, during and after it (100 ms
   buckets of the workers' acks).

**Asserted** (exit 1, after writing the report, if any fails): every one
of the tenants' jobs was acked exactly once over all the phases (the
workers record each acked id; each payload carries its id and is checked),
nothing left queued or in flight, VTRR.CHECK clean on every sub-queue and
queue, and the moved slot is served by its new master; on the standalone
and the fairness queues, no id acked twice and acked + queued + in flight
= enqueued. Timings are measured and reported, never asserted.

Sizes by environment: CLUSTER_TENANTS, CLUSTER_JOBS, ROUNDS (or
CLUSTER_ROUNDS), CLUSTER_WARMUP, CLUSTER_WORKERS, CLUSTER_WHALES,
CLUSTER_WHALE_ITEMS, CLUSTER_ARRIVALS, CLUSTER_LAYOUTS. VTRR_MODULE (the
release module by default), VTRR_REDIS_SERVER (redis-server). `--out`
writes the Markdown report (`make bench-cluster`: docs/cluster-bench.md);
the raw figures go to .bench/cluster.json. `run.py worker` is the worker
process (the driver starts it).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import platform
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = ROOT / ".bench"
PACKAGE_PYTHON = ROOT / "python" / ".venv" / "bin" / "python"
SLOTS = 16384
K = 3  # sub-queues, one per master
PAYLOAD_BYTES = 64
CONCURRENCY = 8
LIGHT_ITEMS = 10
ARRIVAL_GAP = 0.5
BATCH = 1000  # items per VTRR.ENQUEUE
PIPELINE = 5  # VTRR.ENQUEUE calls per round trip in the fill


def env_int(name: str, default: int, *aliases: str) -> int:
    for key in (name, *aliases):
        if os.environ.get(key):
            return int(os.environ[key].replace(",", "").replace("_", ""))
    return default


def module_path() -> Path:
    return Path(os.environ.get("VTRR_MODULE", str(ROOT / "target" / "release" / "libvtrr.so")))


def payload_of(item_id: str) -> bytes:
    return f"{item_id}:".ljust(PAYLOAD_BYTES, ".").encode()


# ---------------------------------------------------------------------------
# The worker process (`run.py worker`).


def worker_main() -> None:
    """One worker process: CB_WORKER (JSON) says what to serve; events go to fd CB_FD.

    Waits for `go` on stdin, then runs `vtrr.Worker` (a no-op handler that
    checks the payload names the job) until it settled warmup + jobs (jobs
    None: until `stop` on stdin, or, with `idle`, until the queue is empty).
    Writes `open` (warm-up done) and `done` (its last measured job) with
    its monotonic clock and CPU, then its acked ids, ack-time buckets and
    (with `record`) every lease to the file `out`.
    """
    import redis

    import vtrr
    from vtrr.sharded import ShardedQueue, unwrap

    cfg = json.loads(os.environ["CB_WORKER"])
    fd = int(os.environ["CB_FD"])
    index = cfg["index"]

    def emit(kind: str, **data: Any) -> None:
        os.write(fd, (json.dumps({"w": index, "kind": kind, **data}) + "\n").encode())

    def snapshot() -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"t": time.monotonic(), "cpu": usage.ru_utime + usage.ru_stime}

    client: Any
    if cfg["cluster"]:
        client = redis.RedisCluster(host="127.0.0.1", port=cfg["port"], socket_timeout=60)
    else:
        client = redis.Redis(port=cfg["port"], socket_timeout=60)
    queue: Any
    if cfg["mode"] == "sharded":
        queue = ShardedQueue(client, cfg["queue"], shards=K)
    else:
        queue = vtrr.Queue(client, cfg["queue"], retry_seconds=120)
    jobs: int | None = cfg["jobs"]
    warmup: int = cfg["warmup"]
    record: bool = cfg["record"]
    own_shard: int = cfg["shard"]
    acked: list[str] = []
    buckets: collections.Counter[int] = collections.Counter()
    leases: list[tuple[float, str | None, str, int]] = []
    bad: list[str] = []
    state = {"settled": 0, "done": False, "last": 0.0}

    def handle(job: vtrr.Job) -> None:
        body = unwrap(job.payload)[1]
        if not body.startswith(job.id.encode() + b":"):
            bad.append(job.id)

    def succeeded(job: vtrr.Job, took: float) -> None:
        now = time.monotonic()
        acked.append(job.id)
        buckets[int(now * 10)] += 1
        state["settled"] += 1
        state["last"] = now
        if warmup and state["settled"] == warmup:
            emit("open", **snapshot())
        if jobs is not None and state["settled"] == warmup + jobs and not state["done"]:
            state["done"] = True
            emit("done", **snapshot())
            worker.stop()

    def leased(job: vtrr.Job) -> None:
        if record:
            shard = getattr(job.lease, "shard", own_shard)
            leases.append((time.monotonic(), job.partition, job.id, shard))

    worker = vtrr.Worker(
        queue,
        handle,
        concurrency=CONCURRENCY,
        block_ms=200,
        exit_when_idle=cfg["idle"],
        hooks=vtrr.Hooks(succeeded=succeeded, leased=leased),
    )

    go = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            elif line.strip() == "stop":
                worker.stop()
        go.set()

    threading.Thread(target=commands, daemon=True).start()
    emit("ready")
    go.wait()
    if not warmup:
        emit("open", **snapshot())
    worker.run()
    if not state["done"]:
        end = snapshot()
        if state["last"]:
            end["t"] = state["last"]
        emit("done", **end)
    Path(cfg["out"]).write_text(
        json.dumps(
            {
                "acked": acked,
                "buckets": {str(k): v for k, v in buckets.items()},
                "leases": leases,
                "bad": bad,
            }
        )
    )
    emit("exit")


# ---------------------------------------------------------------------------
# Servers.


def free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    import random

    while True:
        port = random.randint(20_000, 55_000)
        ok = True
        for candidate in (port, port + 10_000):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", candidate))
                except OSError:
                    ok = False
        if ok:
            return port


class Server:
    """One redis-server with the module, no persistence, on loopback."""

    def __init__(self, pin: list[str], logs: Path, name: str, cluster: bool) -> None:
        import redis

        self.port = free_port()
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="vtrr-cluster-bench-")
        binary = os.environ.get("VTRR_REDIS_SERVER", "redis-server")
        command = [*pin, binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", self.dir]
        command += ["--logfile", str(logs / f"{name}.log"), "--loadmodule", str(module_path())]
        if cluster:
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            command += ["--cluster-node-timeout", "15000"]
        self.process = subprocess.Popen(command)
        self.client = redis.Redis(port=self.port, socket_timeout=300)
        for _ in range(200):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"redis-server did not start (see {logs / f'{name}.log'})")
        self.version = str(self.client.info("server")["redis_version"])
        self.id = self.client.execute_command("CLUSTER", "MYID").decode() if cluster else ""

    def cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def form_cluster(masters: list[Server]) -> None:
    per = SLOTS // len(masters)
    for i, node in enumerate(masters):
        last = SLOTS - 1 if i == len(masters) - 1 else (i + 1) * per - 1
        node.client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
    for node in masters[1:]:
        node.client.execute_command("CLUSTER", "MEET", "127.0.0.1", masters[0].port)
    deadline = time.monotonic() + 60
    while True:
        states = [node.client.execute_command("CLUSTER", "INFO") for node in masters]
        texts = [s.decode() if isinstance(s, bytes) else str(s) for s in states]
        known = [
            len(node.client.execute_command("CLUSTER", "NODES").splitlines()) for node in masters
        ]
        if all("cluster_state:ok" in t for t in texts) and all(n == len(masters) for n in known):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not come up")
        time.sleep(0.05)


def owner(masters: list[Server], slot: int) -> int:
    """The index of the master serving `slot`, as the first master's CLUSTER SLOTS says."""
    for first, last, primary, *_ in masters[0].client.execute_command("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return next(i for i, m in enumerate(masters) if m.port == int(primary[1]))
    raise RuntimeError(f"no owner for slot {slot}")


def placed_name(prefix: str, masters: list[Server]) -> str:
    """The first `prefix-N` whose K sub-queues' slots belong to K different masters."""
    from redis.crc import key_slot

    for n in range(10_000):
        name = f"{prefix}-{n}"
        owners = [owner(masters, key_slot(f"{name}:{i}".encode())) for i in range(K)]
        if sorted(owners) == list(range(K)):
            return name
    raise RuntimeError("no name places its sub-queues on every master")


def pinning() -> tuple[list[str], list[str]]:
    """taskset prefixes: servers on CPU 0, workers on CPU 1 (none on one CPU or CLUSTER_PIN=0)."""
    if os.environ.get("CLUSTER_PIN", "1") == "0":
        return [], []
    if shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2:
        return ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    return [], []


# ---------------------------------------------------------------------------
# Filling.


def send_items(
    server: Server, queue: str, items: Iterable[tuple[str, str]], counter: list[int]
) -> None:
    """VTRR.ENQUEUE of (partition, id) items, 1,000 a call, five calls a round trip."""
    from vtrr.sharded import wrap

    pipe = server.client.pipeline(transaction=False)
    args: list[Any] = []
    calls = 0

    def flush_call() -> None:
        nonlocal args, calls
        if args:
            pipe.execute_command("VTRR.ENQUEUE", queue, *args)
            args = []
            calls += 1

    for partition, item_id in items:
        args += [partition, item_id, 1, wrap(payload_of(item_id), 1)]
        if len(args) == 4 * BATCH:
            flush_call()
            if calls == PIPELINE:
                for reply in pipe.execute():
                    counter[0] += int(reply)
                calls = 0
    flush_call()
    if calls:
        for reply in pipe.execute():
            counter[0] += int(reply)


def fill(targets: list[tuple[Server, str, list[tuple[str, str]]]]) -> dict[str, Any]:
    """Each (server, queue, items) in a thread of its own, timed with each server's CPU."""
    servers = list({id(s): s for s, _, _ in targets}.values())
    cpu_before = {s.port: s.cpu() for s in servers}
    memory_before = {s.port: s.memory() for s in servers}
    counters = [[0] for _ in targets]
    threads = [
        threading.Thread(target=send_items, args=(s, q, items, c))
        for (s, q, items), c in zip(targets, counters, strict=True)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    items = sum(len(i) for _, _, i in targets)
    added = sum(c[0] for c in counters)
    if added != items:
        raise RuntimeError(f"the fill added {added} of {items} items")
    return {
        "items": items,
        "seconds": seconds,
        "items_per_s": items / seconds,
        "server_us": {
            str(s.port): (s.cpu() - cpu_before[s.port])
            * 1e6
            / sum(len(i) for srv, _, i in targets if srv is s)
            for s in servers
        },
        "memory_per_item": {
            str(s.port): (s.memory() - memory_before[s.port])
            / sum(len(i) for srv, _, i in targets if srv is s)
            for s in servers
        },
    }


# ---------------------------------------------------------------------------
# Running worker processes.


class Workers:
    """Worker processes started together; their events read from one pipe."""

    def __init__(self, specs: list[dict[str, Any]], pin: list[str], logs: Path, tag: str) -> None:
        self.specs = specs
        self.read_end, write_end = os.pipe()
        self.events: list[dict[str, Any]] = []
        self.by_worker: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in range(len(specs))}
        self.processes = []
        self.logs = []
        self.buffer = b""
        self.outs = []
        for i, spec in enumerate(specs):
            out = logs / f"{tag}-w{i}.json"
            self.outs.append(out)
            config = {"index": i, "out": str(out), **spec}
            log = logs / f"{tag}-w{i}.log"
            self.logs.append(log)
            env = {**os.environ, "CB_WORKER": json.dumps(config), "CB_FD": str(write_end)}
            with log.open("wb") as sink:
                self.processes.append(
                    subprocess.Popen(
                        [*pin, str(PACKAGE_PYTHON), str(Path(__file__).resolve()), "worker"],
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        pass_fds=(write_end,),
                    )
                )
        os.close(write_end)

    def tell(self, line: str, which: Iterable[int] | None = None) -> None:
        for i in which if which is not None else range(len(self.processes)):
            stdin = self.processes[i].stdin
            assert stdin is not None
            try:
                stdin.write((line + "\n").encode())
                stdin.flush()
            except BrokenPipeError:
                pass

    def next_event(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no event from the workers in time:\n" + self.tails())
            ready, _, _ = select.select([self.read_end], [], [], min(1.0, left))
            if not ready:
                for i, process in enumerate(self.processes):
                    if process.poll() not in (None, 0):
                        raise RuntimeError(f"worker {i} failed:\n{tail(self.logs[i])}")
                continue
            chunk = os.read(self.read_end, 65536)
            if not chunk:
                raise RuntimeError("the workers' pipe closed early:\n" + self.tails())
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        event = json.loads(line)
        self.by_worker[event["w"]][event["kind"]] = event
        self.events.append(event)
        return event

    def wait_all(
        self, kind: str, deadline: float, on: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        while not all(kind in got for got in self.by_worker.values()):
            event = self.next_event(deadline)
            if on is not None:
                on(event)

    def tails(self) -> str:
        return "\n".join(f"--- worker {i}\n{tail(log)}" for i, log in enumerate(self.logs))

    def finish(self, timeout: float = 600) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        self.wait_all("exit", deadline)
        for i, process in enumerate(self.processes):
            process.wait(timeout=60)
            if process.returncode != 0:
                raise RuntimeError(f"worker {i} exited {process.returncode}:\n{tail(self.logs[i])}")
        os.close(self.read_end)
        results = [json.loads(out.read_text()) for out in self.outs]
        for out in self.outs:
            out.unlink()
        return results

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Ledger:
    """Acked ids per queue family, the payloads found wrong."""

    def __init__(self) -> None:
        self.acked: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.bad: list[str] = []

    def add(self, family: str, results: list[dict[str, Any]]) -> None:
        for result in results:
            self.acked[family].update(result["acked"])
            self.bad += result["bad"]


def spec(
    *,
    port: int,
    cluster: bool,
    queue: str,
    jobs: int | None,
    warmup: int,
    shard: int = 0,
    mode: str = "queue",
    record: bool = False,
    idle: bool = False,
    server: int = 0,
) -> dict[str, Any]:
    return {
        "port": port, "cluster": cluster, "queue": queue, "jobs": jobs, "warmup": warmup,
        "shard": shard, "mode": mode, "record": record, "idle": idle, "server": server,
    }  # fmt: skip


def throughput_round(
    specs: list[dict[str, Any]],
    servers: dict[int, Server],
    pin: list[str],
    logs: Path,
    tag: str,
    ledger: Ledger,
    family: str,
) -> dict[str, Any]:
    """Workers drain their quotas; per server (the `server` key of each spec) and in total."""
    workers = Workers(specs, pin, logs, tag)
    try:
        deadline = time.monotonic() + 600
        workers.wait_all("ready", deadline)
        workers.tell("go")
        opened: dict[int, dict[str, float]] = {}
        closed: dict[int, dict[str, float]] = {}
        remaining = collections.Counter(s["server"] for s in specs)

        def on(event: dict[str, Any]) -> None:
            group = specs[event["w"]]["server"]
            if event["kind"] == "open" and group not in opened:
                opened[group] = {"cpu": servers[group].cpu()}
            if event["kind"] == "done":
                remaining[group] -= 1
                if remaining[group] == 0:
                    closed[group] = {"cpu": servers[group].cpu()}

        workers.wait_all("done", deadline, on)
        results = workers.finish()
    except BaseException:
        workers.kill()
        raise
    ledger.add(family, results)
    per_server = {}
    for group in sorted(opened):
        mine = [i for i, s in enumerate(specs) if s["server"] == group]
        start = min(workers.by_worker[i]["open"]["t"] for i in mine)
        end = max(workers.by_worker[i]["done"]["t"] for i in mine)
        jobs = sum(specs[i]["jobs"] for i in mine)
        client_cpu = sum(
            workers.by_worker[i]["done"]["cpu"] - workers.by_worker[i]["open"]["cpu"] for i in mine
        )
        server_cpu = closed[group]["cpu"] - opened[group]["cpu"]
        per_server[str(group)] = {
            "jobs": jobs,
            "seconds": end - start,
            "jobs_per_s": jobs / (end - start),
            "server_us": server_cpu * 1e6 / jobs,
            "server_busy": server_cpu / (end - start),
            "client_us": client_cpu * 1e6 / jobs,
        }
    start = min(w["open"]["t"] for w in workers.by_worker.values())
    end = max(w["done"]["t"] for w in workers.by_worker.values())
    jobs = sum(s["jobs"] for s in specs)
    client_cpu = sum(w["done"]["cpu"] - w["open"]["cpu"] for w in workers.by_worker.values())
    server_cpu = sum(p["server_us"] * p["jobs"] / 1e6 for p in per_server.values())
    return {
        "per_server": per_server,
        "total": {
            "jobs": jobs,
            "seconds": end - start,
            "jobs_per_s": jobs / (end - start),
            "server_us": server_cpu * 1e6 / jobs,
            "client_us": client_cpu * 1e6 / jobs,
            "client_busy": client_cpu / (end - start),
        },
    }


# ---------------------------------------------------------------------------
# The slot move.


def move_slot(masters: list[Server], slot: int, source: int, target: int) -> dict[str, Any]:
    """The legacy reshard of one slot: IMPORTING/MIGRATING, MIGRATE each key, SETSLOT NODE."""
    src, dst = masters[source].client, masters[target].client
    started = time.monotonic()
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", masters[source].id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", masters[target].id)
    each: list[tuple[str, float]] = []
    while True:
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
        if not keys:
            break
        began = time.monotonic()
        src.execute_command(
            "MIGRATE", "127.0.0.1", masters[target].port, "", 0, 120_000, "KEYS", *keys
        )
        each.append((keys[0].decode(), time.monotonic() - began))
    migrated = time.monotonic()
    order = [target, source, *(i for i in range(len(masters)) if i not in (source, target))]
    for i in order:
        masters[i].client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", masters[target].id)
    ended = time.monotonic()
    return {
        "started": started,
        "ended": ended,
        "seconds": ended - started,
        "migrate_seconds": migrated - started,
        "keys": each,
    }


# ---------------------------------------------------------------------------
# The phases.


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from .bench/cluster.json"
    )
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads((STATE / "cluster.json").read_text())
        text = report(saved)
        if args.out:
            args.out.write_text(text)
        else:
            print(text)
        return
    if not module_path().exists():
        sys.exit(f"bench-cluster: {module_path()} is missing: cargo build --release (make release)")
    try:
        import redis  # noqa: F401

        import vtrr  # noqa: F401
    except ImportError:
        os.execv(PACKAGE_PYTHON, [str(PACKAGE_PYTHON), __file__, *sys.argv[1:]])

    sizes = {
        "tenants": env_int("CLUSTER_TENANTS", 1_000_000),
        "jobs": env_int("CLUSTER_JOBS", 60_000),
        "rounds": env_int("CLUSTER_ROUNDS", 3, "ROUNDS"),
        "warmup": env_int("CLUSTER_WARMUP", 2_000),
        "workers": env_int("CLUSTER_WORKERS", 1),
        "whales": env_int("CLUSTER_WHALES", 30),
        "whale_items": env_int("CLUSTER_WHALE_ITEMS", 6_000),
        "arrivals": env_int("CLUSTER_ARRIVALS", 5),
        "reshard_after": float(os.environ.get("CLUSTER_RESHARD_AFTER", "1.5")),
        "layouts": os.environ.get("CLUSTER_LAYOUTS", "keys,native").split(","),
    }
    logs = STATE / "logs" / "cluster"
    logs.mkdir(parents=True, exist_ok=True)
    server_pin, worker_pin = pinning()
    if worker_pin:
        os.sched_setaffinity(0, {1})  # the driver beside the workers
    masters: list[Server] = []
    solo: Server | None = None
    began = time.monotonic()
    load_before = os.getloadavg()
    try:
        for i in range(K):
            masters.append(Server(server_pin, logs, f"master-{i}", cluster=True))
        solo = Server(server_pin, logs, "standalone", cluster=False)
        form_cluster(masters)
        data = run(sizes, masters, solo, worker_pin, logs)
    finally:
        for server in [*masters, *([solo] if solo else [])]:
            server.close()
    data["elapsed"] = time.monotonic() - began
    data["meta"] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "redis": masters[0].version,
        "python": platform.python_version(),
        "redis_py": __import__("importlib.metadata").metadata.version("redis"),
        "git": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip(),
        "dirty": bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                     capture_output=True, text=True).stdout.strip()),
        "module": str(module_path()),
        "pinning": "servers pinned to CPU 0, workers and the driver to CPU 1 (taskset)"
        if worker_pin else "unpinned",
        "sizes": sizes,
        "load": [load_before, os.getloadavg()],
    }  # fmt: skip
    (STATE / "cluster.json").write_text(json.dumps(data, indent=1))
    text = report(data)
    if args.out:
        args.out.write_text(text)
        print(f"bench-cluster: wrote {args.out} ({data['elapsed']:.0f} s)")
    else:
        print(text)
    if data["failures"]:
        print("bench-cluster: FAILED:\n  " + "\n  ".join(data["failures"]), file=sys.stderr)
        sys.exit(1)


def run(
    sizes: dict[str, Any], masters: list[Server], solo: Server, pin: list[str], logs: Path
) -> dict[str, Any]:
    import redis
    from redis.crc import key_slot

    import vtrr
    from vtrr.sharded import shard_of

    def say(text: str) -> None:
        print(f"bench-cluster {time.strftime('%H:%M:%S')}: {text}", flush=True)

    failures: list[str] = []
    ledger = Ledger()
    port0 = masters[0].port
    rc = redis.RedisCluster(host="127.0.0.1", port=port0, socket_timeout=300)
    name = placed_name("tenants", masters)
    subnames = [f"{{{name}:{i}}}" for i in range(K)]
    slots = [key_slot(f"{name}:{i}".encode()) for i in range(K)]
    home = [owner(masters, slot) for slot in slots]
    solo_name = "tenants"
    by_port = {m.port: m for m in masters} | {solo.port: solo}
    data: dict[str, Any] = {"failures": failures, "placement": [
        {"queue": subnames[i], "slot": slots[i], "master": home[i], "port": masters[home[i]].port}
        for i in range(K)
    ]}  # fmt: skip

    # 1. Fill.
    tenants = sizes["tenants"]
    say(f"hashing {tenants:,} tenants over {K} sub-queues")
    split_started = time.monotonic()
    per_shard: list[list[tuple[str, str]]] = [[] for _ in range(K)]
    for t in range(tenants):
        partition = f"tenant-{t}"
        per_shard[shard_of(partition, K)].append((partition, f"t{t}"))
    split_seconds = time.monotonic() - split_started
    data["tenants_per_shard"] = [len(s) for s in per_shard]
    say(f"filling the cluster ({[len(s) for s in per_shard]})")
    data["fill_cluster"] = fill([(masters[home[i]], subnames[i], per_shard[i]) for i in range(K)])
    data["fill_cluster"]["split_seconds"] = split_seconds
    say(f"cluster filled in {data['fill_cluster']['seconds']:.1f} s; filling the standalone master")
    everyone = [item for shard in per_shard for item in shard]
    data["fill_solo"] = fill([(solo, solo_name, everyone)])
    del everyone
    say(f"standalone filled in {data['fill_solo']['seconds']:.1f} s")
    # One sub-queue's n_i, as a ShardedQueue's rotation read it every 16
    # leases (a PARTITIONS scan) and as it reads it now (STATS).
    probe_queue = vtrr.Queue(masters[home[0]].client, subnames[0])
    cpu = masters[home[0]].cpu()
    started = time.monotonic()
    seen = sum(1 for view in probe_queue.partitions(count=1000) if view.queued > 0)
    scanned = time.monotonic() - started
    started = time.monotonic()
    reply = masters[home[0]].client.execute_command("VTRR.STATS", subnames[0])
    stats_seconds = time.monotonic() - started
    # A map under RESP3, flat pairs under RESP2.
    fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    data["partitions_read"] = {
        "partitions": seen,
        "seconds": scanned,
        "server_seconds": masters[home[0]].cpu() - cpu,
        "stats_partitions": int(fields[b"queued-partitions"]),
        "stats_seconds": stats_seconds,
    }
    say(f"one n_i read: {seen:,} partitions in {scanned:.2f} s; STATS in {stats_seconds * 1e3:.2f} ms")

    # How fast this machine is now: make bench-e2e's no-op row (one worker, 100 partitions).
    calibration = [(f"p{i % 100}", f"c{i}") for i in range(22_000)]
    fill([(solo, "calibration", calibration)])
    data["calibration"] = throughput_round(
        [spec(port=solo.port, cluster=False, queue="calibration", jobs=20_000, warmup=2_000,
              server=solo.port)],
        by_port, pin, logs, "calibration", ledger, "calibration",
    )["total"]  # fmt: skip
    say(f"calibration: {data['calibration']['jobs_per_s']:.0f} jobs/s")

    # 2. Throughput rounds.
    workers_per = sizes["workers"]
    per_worker = max(1, sizes["jobs"] // (K * workers_per))
    warmup = sizes["warmup"]
    cluster_specs = [
        spec(port=port0, cluster=True, queue=subnames[i], jobs=per_worker, warmup=warmup,
             shard=i, server=masters[home[i]].port)
        for i in range(K) for _ in range(workers_per)
    ]  # fmt: skip
    solo_specs = [
        spec(port=solo.port, cluster=False, queue=solo_name, jobs=per_worker, warmup=warmup,
             server=solo.port)
        for _ in range(K * workers_per)
    ]  # fmt: skip
    single_specs = [
        spec(port=solo.port, cluster=False, queue=solo_name, jobs=per_worker, warmup=warmup,
             server=solo.port)
    ]  # fmt: skip
    needed = (
        len(sizes["layouts"]) * sizes["rounds"] * workers_per * (per_worker + warmup + CONCURRENCY)
    )
    solo_needed = (
        len(sizes["layouts"])
        * sizes["rounds"]
        * (K * workers_per + 1)
        * (per_worker + warmup + CONCURRENCY)
    )
    if needed > 0.95 * min(data["tenants_per_shard"]) or solo_needed > 0.95 * tenants:
        raise SystemExit(
            f"bench-cluster: the rounds take {needed:,} jobs from each sub-queue, which holds "
            f"{min(data['tenants_per_shard']):,}: raise CLUSTER_TENANTS or lower CLUSTER_JOBS, ROUNDS"
        )
    rounds: list[dict[str, Any]] = []
    data["rounds"] = rounds
    data["convert"] = []
    for layout in sizes["layouts"]:
        if layout != "keys":
            data["convert"].append(convert_all(masters, home, subnames, solo, solo_name, layout))
            say(f"converted to {layout}: {data['convert'][-1]}")
        for number in range(sizes["rounds"]):
            systems = (
                ("cluster", cluster_specs),
                ("standalone", solo_specs),
                ("single", single_specs),
            )
            for system, specs in systems:
                tag = f"{layout}-r{number + 1}-{system}"
                family = "cluster" if system == "cluster" else "standalone"
                result = throughput_round(specs, by_port, pin, logs, tag, ledger, family)
                result.update(layout=layout, round=number + 1, system=system)
                rounds.append(result)
                say(
                    f"{tag}: {result['total']['jobs_per_s']:.0f} jobs/s, server "
                    f"{result['total']['server_us']:.1f} µs/job, client {result['total']['client_us']:.1f} µs/job"
                )
    if sizes["layouts"][-1] != "keys":
        data["convert"].append(convert_all(masters, home, subnames, solo, solo_name, "keys"))
        say(f"converted back to keys: {data['convert'][-1]}")

    # 3. Fairness across shards.
    data["fairness"] = []
    for variant in ("per-shard", "sharded", "standalone"):
        data["fairness"].append(
            fairness(variant, sizes, masters, solo, rc, pin, logs, ledger, failures)
        )
        say(f"fairness, {variant}: {summary(data['fairness'][-1])}")

    # 4. The live reshard, draining every tenant left.
    moved_shard = K - 1
    source = home[moved_shard]
    target = home[0]
    specs = [
        spec(port=port0, cluster=True, queue=subnames[i], jobs=None, warmup=0, shard=i,
             idle=True, server=masters[home[i]].port)
        for i in range(K)
    ]  # fmt: skip
    queued_before = sum(vtrr.Queue(rc, q).stats().queued for q in subnames)
    say(f"draining the {queued_before:,} tenants left; moving {subnames[moved_shard]}'s slot "
        f"{slots[moved_shard]} from master {source} to master {target} under it")  # fmt: skip
    workers = Workers(specs, pin, logs, "reshard")
    move: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 900
        workers.wait_all("ready", deadline)
        workers.tell("go")
        workers.wait_all("open", deadline)
        opened = time.monotonic()

        def mover() -> None:
            time.sleep(sizes["reshard_after"])
            try:
                move.update(move_slot(masters, slots[moved_shard], source, target))
            except Exception as error:  # reported below
                move["error"] = repr(error)

        thread = threading.Thread(target=mover)
        thread.start()
        results = workers.finish(timeout=900)
        thread.join()
    except BaseException:
        workers.kill()
        raise
    ledger.add("cluster", results)
    if "error" in move:
        failures.append(f"the slot move failed: {move['error']}")
    reshard = {
        "queued_before": queued_before,
        "moved": subnames[moved_shard],
        "slot": slots[moved_shard],
        "source": source,
        "target": target,
        "opened": opened,
        **move,
    }
    reshard.update(reshard_rates(results, move, workers, moved_shard))
    data["reshard"] = reshard
    if "seconds" in move:
        say(f"slot moved in {move['seconds']:.2f} s; drained in {reshard['drain_seconds']:.1f} s")

    # Verification.
    now_owner = owner(masters, slots[moved_shard])
    for m in masters:  # every master agrees on the new owner
        mine = [
            int(primary[1])
            for first, last, primary, *_ in m.client.execute_command("CLUSTER", "SLOTS")
            if first <= slots[moved_shard] <= last
        ]
        if mine != [masters[target].port]:
            failures.append(f"master {m.port} says slot {slots[moved_shard]} is served by {mine}")
    if now_owner != target:
        failures.append(f"slot {slots[moved_shard]} is served by master {now_owner}, not {target}")
    left = [
        masters[source].client.execute_command("CLUSTER", "COUNTKEYSINSLOT", slots[moved_shard])
    ]
    if left != [0]:
        failures.append(f"keys of the moved slot left on the old master: {left}")
    counted = ledger.acked["cluster"]
    doubled = [i for i, n in counted.items() if n > 1]
    expected = {f"t{t}" for t in range(tenants)}
    missing = expected - counted.keys()
    extra = counted.keys() - expected
    cluster_checks = {}
    for q in subnames:
        queue = vtrr.Queue(rc, q)
        stats = queue.stats()
        cluster_checks[q] = {
            "queued": stats.queued, "inflight": stats.inflight, "acked_total": stats.totals.acked,
            "check": queue.check(),
        }  # fmt: skip
        if stats.queued or stats.inflight or stats.delayed or stats.dead:
            failures.append(f"{q}: left {stats}")
        if cluster_checks[q]["check"]:
            failures.append(f"{q}: VTRR.CHECK: {cluster_checks[q]['check']}")
    if doubled:
        failures.append(f"{len(doubled)} tenants' jobs acked twice, e.g. {doubled[:5]}")
    if missing:
        failures.append(f"{len(missing)} tenants' jobs never acked, e.g. {sorted(missing)[:5]}")
    if extra:
        failures.append(f"{len(extra)} unknown ids acked, e.g. {sorted(extra)[:5]}")
    acked_total = sum(c["acked_total"] for c in cluster_checks.values())
    if acked_total != tenants:
        failures.append(f"the sub-queues' acked-total is {acked_total}, not {tenants}")
    solo_queue = vtrr.Queue(solo.client, solo_name)
    solo_stats = solo_queue.stats()
    solo_counted = ledger.acked["standalone"]
    solo_doubled = [i for i, n in solo_counted.items() if n > 1]
    if solo_doubled:
        failures.append(f"standalone: {len(solo_doubled)} ids acked twice")
    if len(solo_counted) + solo_stats.queued + solo_stats.inflight != tenants:
        failures.append(
            f"standalone: {len(solo_counted)} acked + {solo_stats.queued} queued + "
            f"{solo_stats.inflight} in flight != {tenants}"
        )
    solo_check = solo_queue.check()
    if solo_check:
        failures.append(f"standalone: VTRR.CHECK: {solo_check}")
    if ledger.bad:
        failures.append(
            f"{len(ledger.bad)} jobs leased with a payload not their own: {ledger.bad[:5]}"
        )
    data["verification"] = {
        "acked_once": len(counted) - len(doubled),
        "doubled": len(doubled),
        "missing": len(missing),
        "extra": len(extra),
        "sub_queues": cluster_checks,
        "owner_after": now_owner,
        "standalone": {"acked": len(solo_counted), "doubled": len(solo_doubled),
                       "queued": solo_stats.queued, "check": solo_check},
        "bad_payloads": len(ledger.bad),
    }  # fmt: skip
    rc.close()
    return data


def convert_all(
    masters: list[Server],
    home: list[int],
    subnames: list[str],
    solo: Server,
    solo_name: str,
    layout: str,
) -> dict[str, float]:
    """VTRR.CONVERT of every sub-queue (a thread per master, at once) and of the standalone queue."""
    import vtrr

    took: dict[str, float] = {}

    def one(i: int) -> None:
        started = time.monotonic()
        vtrr.Queue(masters[home[i]].client, subnames[i]).convert(layout)  # type: ignore[arg-type]
        took[subnames[i]] = time.monotonic() - started

    threads = [threading.Thread(target=one, args=(i,)) for i in range(K)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took["cluster, all three at once"] = time.monotonic() - started
    started = time.monotonic()
    vtrr.Queue(solo.client, solo_name).convert(layout)  # type: ignore[arg-type]
    took["standalone"] = time.monotonic() - started
    return {"to": layout, **took}  # type: ignore[dict-item]


def fairness(
    variant: str,
    sizes: dict[str, Any],
    masters: list[Server],
    solo: Server,
    rc: Any,
    pin: list[str],
    logs: Path,
    ledger: Ledger,
    failures: list[str],
) -> dict[str, Any]:
    """Whales in every sub-queue, then light tenants arriving; where their first items were served."""
    from redis.crc import key_slot

    import vtrr
    from vtrr.sharded import ShardedQueue

    whales = sizes["whales"]
    items = sizes["whale_items"]
    if variant == "standalone":
        name = "whales"
        queue_names = [name]
        shard_of_partition: Callable[[str], int] = lambda partition: 0  # noqa: E731
        groups = [[(f"whale-{w}", f"w{w}-{j}") for j in range(items) for w in range(whales)]]
        fill([(solo, name, groups[0])])
        light_queue: Any = vtrr.Queue(solo.client, name)
        servers = [solo]
    else:
        name = placed_name(f"whales-{variant}", masters)
        queue_names = [f"{{{name}:{i}}}" for i in range(K)]
        light_queue = ShardedQueue(rc, name, shards=K)
        shard_of_partition = light_queue.shard_of
        groups = [[] for _ in range(K)]
        # Round by round (each whale's j-th item), so every whale stays backlogged.
        for j in range(items):
            for w in range(whales):
                groups[shard_of_partition(f"whale-{w}")].append((f"whale-{w}", f"w{w}-{j}"))
        servers = [masters[owner(masters, key_slot(f"{name}:{i}".encode()))] for i in range(K)]
        fill([(servers[i], queue_names[i], groups[i]) for i in range(K)])
    whales_per = [len({p for p, _ in g}) for g in groups]
    enqueued = sum(len(g) for g in groups)
    if variant == "per-shard":
        specs = [
            spec(port=masters[0].port, cluster=True, queue=queue_names[i], jobs=None, warmup=500,
                 shard=i, record=True)
            for i in range(K)
        ]  # fmt: skip
    elif variant == "sharded":
        specs = [
            spec(port=masters[0].port, cluster=True, queue=name, jobs=None, warmup=500,
                 mode="sharded", record=True)
            for _ in range(K)
        ]  # fmt: skip
    else:
        specs = [
            spec(port=solo.port, cluster=False, queue=name, jobs=None, warmup=500, record=True)
            for _ in range(K)
        ]
    workers = Workers(specs, pin, logs, f"fair-{variant}")
    arrivals: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 600
        workers.wait_all("ready", deadline)
        workers.tell("go")
        workers.wait_all("open", deadline)
        time.sleep(0.3)
        for a in range(sizes["arrivals"]):
            partition = f"light-{variant}-{a}"
            light = [vtrr.Item(partition, f"l{a}-{j}", b"") for j in range(LIGHT_ITEMS)]
            light = [vtrr.Item(i.partition, i.id, payload_of(i.id)) for i in light]
            sent = time.monotonic()
            light_queue.enqueue_many(light)
            replied = time.monotonic()
            arrivals.append(
                {
                    "partition": partition,
                    "shard": shard_of_partition(partition),
                    "sent": sent,
                    "t0": replied,
                }
            )
            time.sleep(ARRIVAL_GAP)
        time.sleep(1.0)
        backlog = [vtrr.Queue(rc if variant != "standalone" else solo.client, q).stats().queued
                   for q in queue_names]  # fmt: skip
        workers.tell("stop")
        results = workers.finish()
    except BaseException:
        workers.kill()
        raise
    ledger.add(f"fair-{variant}", results)
    leases = sorted(
        (tuple(lease) for result in results for lease in result["leases"]), key=lambda x: x[0]
    )
    found = []
    for arrival in arrivals:
        mine = [lease for lease in leases if lease[1] == arrival["partition"]]
        if len(mine) < LIGHT_ITEMS:
            found.append({**arrival, "served": len(mine)})
            continue
        t0, first = arrival["t0"], mine[0][0]
        shard = arrival["shard"]
        own = sum(1 for lease in leases if t0 < lease[0] < first and lease[3] == shard)
        every = sum(1 for lease in leases if t0 < lease[0] < first)
        gaps = []
        for before, after in itertools.pairwise(mine):
            gaps.append(
                sum(
                    1
                    for lease in leases
                    if before[0] < lease[0] < after[0]
                    and lease[3] == shard
                    and lease[1] != arrival["partition"]
                )
            )
        found.append(
            {
                **arrival,
                "served": len(mine),
                "wait_ms": (first - t0) * 1000,
                "wait_sent_ms": (first - arrival["sent"]) * 1000,
                "items_own": own,
                "items_all": every,
                "whales_own": whales_per[shard],
                "per_item_items": statistics.median(gaps),
                "per_item_ms": (mine[-1][0] - first) * 1000 / (len(mine) - 1),
            }
        )
    acked = collections.Counter(i for result in results for i in result["acked"])
    doubled = [i for i, n in acked.items() if n > 1]
    checks = []
    queued = inflight = 0
    for q in queue_names:
        queue = vtrr.Queue(rc if variant != "standalone" else solo.client, q)
        stats = queue.stats()
        queued += stats.queued
        inflight += stats.inflight
        checks += queue.check()
    light_total = LIGHT_ITEMS * len(arrivals)
    if doubled:
        failures.append(f"fairness {variant}: {len(doubled)} ids acked twice")
    if len(acked) + queued + inflight != enqueued + light_total:
        failures.append(
            f"fairness {variant}: {len(acked)} acked + {queued} queued + {inflight} in flight "
            f"!= {enqueued + light_total} enqueued"
        )
    if checks:
        failures.append(f"fairness {variant}: VTRR.CHECK: {checks}")
    return {
        "variant": variant,
        "whales": whales,
        "whale_items": items,
        "whales_per_shard": whales_per,
        "backlog_at_end": backlog,
        "leases": len(leases),
        "arrivals": found,
    }


def summary(result: dict[str, Any]) -> str:
    waits = [a["wait_ms"] for a in result["arrivals"] if "wait_ms" in a]
    own = [a["items_own"] for a in result["arrivals"] if "items_own" in a]
    if not waits:
        return "no light tenant served"
    return f"wait {statistics.median(waits):.1f} ms, {statistics.median(own)} items of its sub-queue first"


def reshard_rates(
    results: list[dict[str, Any]], move: dict[str, Any], workers: Workers, moved: int
) -> dict[str, Any]:
    """Jobs/s from the workers' 100 ms ack buckets: before, during and after the move."""
    total: collections.Counter[int] = collections.Counter()
    moved_shard: collections.Counter[int] = collections.Counter()
    for i, result in enumerate(results):
        for bucket, count in result["buckets"].items():
            total[int(bucket)] += count
            if workers.specs[i]["shard"] == moved:
                moved_shard[int(bucket)] += count
    first = min(total)
    last = max(total)
    drain = (last - first + 1) / 10
    out: dict[str, Any] = {
        "drain_seconds": drain,
        "drained": sum(total.values()),
        "drain_jobs_per_s": sum(total.values()) / drain,
    }
    if "started" not in move:
        return out
    start = int(move["started"] * 10)
    end = int(move["ended"] * 10)

    def rate(counter: collections.Counter[int], lo: int, hi: int) -> float | None:
        lo, hi = max(lo, first), min(hi, last)
        if hi < lo:
            return None
        return sum(counter[b] for b in range(lo, hi + 1)) / ((hi - lo + 1) / 10)

    out.update(
        before=rate(total, start - 10, start - 1),
        during=rate(total, start, end),
        after=rate(total, end + 1, end + 10),
        moved_before=rate(moved_shard, start - 10, start - 1),
        moved_during=rate(moved_shard, start, end),
        moved_after=rate(moved_shard, end + 1, end + 10),
        lowest_bucket=min(total[b] for b in range(start, end + 1)) * 10 if end >= start else None,
        moved_idle_ms=100 * sum(1 for b in range(start, end + 1) if moved_shard[b] == 0),
        timeline=[
            [(b - start) / 10, total[b] * 10, moved_shard[b] * 10]
            for b in range(start - 10, end + 11)
        ],
    )
    return out


# ---------------------------------------------------------------------------
# The report.


def med(values: list[float], fmt: Callable[[float], str]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def rate_fmt(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def us_fmt(value: float) -> str:
    return f"{value:.1f}"


def pct_fmt(value: float) -> str:
    return f"{value * 100:.0f}%"


def report(data: dict[str, Any]) -> str:
    meta = data["meta"]
    sizes = meta["sizes"]
    placement = data["placement"]
    fill_c, fill_s = data["fill_cluster"], data["fill_solo"]
    ports = [p["port"] for p in placement]
    lines = [
        "# A 3-master Redis Cluster on loopback (`make bench-cluster`)",
        "",
        "Written by `make bench-cluster` ([bench/cluster/run.py](../bench/cluster/run.py) says "
        "exactly what it measures); the model and the narrative are in "
        "[scaling.md](scaling.md#a-3-master-cluster-measured).",
        "",
        f"Run of {meta['date']} on {meta['cpu']} ({meta['cpus']} CPUs, Linux {meta['kernel']}), "
        f"{data['elapsed'] / 60:.1f} minutes: Redis {meta['redis']}, the release module (commit "
        f"{meta['git']}{' + uncommitted changes' if meta['dirty'] else ''}), Python "
        f"{meta['python']}, redis-py {meta['redis_py']}; {meta['pinning']}. Three masters, no "
        "replicas, no persistence, and one standalone master beside them for comparison. The "
        "machine's load average (1 minute) was "
        f"{meta['load'][0][0]:.2f} at the start and {meta['load'][1][0]:.2f} at the end (other work "
        "shares its two CPUs: read the rates as this run's, and compare rows within it).",
        "",
        f"Sizes: {sizes['tenants']:,} tenants of one item each ({PAYLOAD_BYTES}-byte payloads); "
        f"{sizes['rounds']} interleaved rounds per layout of {sizes['jobs']:,} measured jobs "
        f"(after a warm-up of {sizes['warmup']:,} per worker), {sizes['workers']} worker process(es) "
        f"per sub-queue, `vtrr.Worker` at concurrency {CONCURRENCY}, a no-op handler; "
        f"{sizes['whales']} whales of {sizes['whale_items']:,} items and {sizes['arrivals']} light "
        f"tenants of {LIGHT_ITEMS} items for fairness. Each cell: the median over rounds (min–max).",
        "",
        "## Placement and fill",
        "",
        "| sub-queue | slot | master (port) | tenants |",
        "|---|---|---|---|",
    ]
    for i, p in enumerate(placement):
        lines.append(
            f"| `{p['queue']}` | {p['slot']} | {p['master']} ({p['port']}) | {data['tenants_per_shard'][i]:,} |"
        )
    lines += [
        "",
        "| fill | items | wall s | items/s | server CPU µs per item, each master | memory per item, each master |",
        "|---|---|---|---|---|---|",
        f"| cluster, a thread per master | {fill_c['items']:,} | {fill_c['seconds']:.1f} | "
        f"{rate_fmt(fill_c['items_per_s'])} | "
        + " / ".join(f"{fill_c['server_us'][str(p)]:.2f}" for p in ports)
        + " | "
        + " / ".join(f"{fill_c['memory_per_item'][str(p)]:.0f} B" for p in ports)
        + " |",
        f"| standalone, one queue | {fill_s['items']:,} | {fill_s['seconds']:.1f} | "
        f"{rate_fmt(fill_s['items_per_s'])} | "
        + " / ".join(f"{v:.2f}" for v in fill_s["server_us"].values())
        + " | "
        + " / ".join(f"{v:.0f} B" for v in fill_s["memory_per_item"].values())
        + " |",
        "",
        f"Hashing the tenants to their sub-queues (`shard_of`, in Python) took "
        f"{fill_c['split_seconds']:.1f} s before the cluster's fill, not counted in it. One full "
        f"read of one sub-queue's VTRR.PARTITIONS (what a ShardedQueue's rotation read for each "
        f"sub-queue every 16 leases): {data['partitions_read']['partitions']:,} partitions in "
        f"{data['partitions_read']['seconds']:.2f} s ({data['partitions_read']['server_seconds']:.2f} s "
        "of the master's CPU); what it reads now, VTRR.STATS `queued-partitions`: "
        f"{data['partitions_read']['stats_partitions']:,} in "
        f"{data['partitions_read']['stats_seconds'] * 1e3:.2f} ms.",
        "",
    ]
    for layout in sizes["layouts"]:
        mine = [r for r in data["rounds"] if r["layout"] == layout]
        if not mine:
            continue
        cluster = [r for r in mine if r["system"] == "cluster"]
        solo = [r for r in mine if r["system"] == "standalone"]
        calib = data.get("calibration")
        lines += [
            f"## Throughput, {layout} layout",
            "",
        ]
        if calib and layout == sizes["layouts"][0]:
            lines += [
                "How fast the machine was during this run: `make bench-e2e`'s no-op row (one worker "
                "process, concurrency 8, 20,000 jobs over 100 partitions, keys layout, on the standalone "
                f"master) ran {rate_fmt(calib['jobs_per_s'])} jobs/s at {calib['server_us']:.1f} µs of "
                f"server CPU and {calib['client_us']:.1f} µs of worker CPU per job, against 38.4k, 6.8 and "
                "16.9 on the quiet Intel host of 2 December ([performance.md](performance.md#end-to-end-the-worker-against-bullmq-celery-and-rq)).",
                "",
            ]
        lines += [
            "| what | jobs | jobs/s | server CPU µs/job | server busy (of one core) | worker CPU µs/job |",
            "|---|---|---|---|---|---|",
        ]
        for i, p in enumerate(placement):
            rows = [r["per_server"][str(p["port"])] for r in cluster]
            lines.append(
                f"| shard {i}: `{p['queue']}`, master {p['master']} | {rows[0]['jobs']:,} | "
                f"{med([x['jobs_per_s'] for x in rows], rate_fmt)} | {med([x['server_us'] for x in rows], us_fmt)} | "
                f"{med([x['server_busy'] for x in rows], pct_fmt)} | {med([x['client_us'] for x in rows], us_fmt)} |"
            )
        totals = [r["total"] for r in cluster]
        lines.append(
            f"| **cluster, 3 shards, in total** | {totals[0]['jobs']:,} | **{med([x['jobs_per_s'] for x in totals], rate_fmt)}** | "
            f"{med([x['server_us'] for x in totals], us_fmt)} | — | {med([x['client_us'] for x in totals], us_fmt)} |"
        )
        single = [r for r in mine if r["system"] == "single"]
        for label, runs in (
            (
                f"**one standalone master, one queue, {sizes['workers'] * K} worker processes**",
                solo,
            ),
            ("one standalone master, one queue, 1 worker process", single),
        ):
            srows = [next(iter(r["per_server"].values())) for r in runs]
            if not srows:
                continue
            lines.append(
                f"| {label} | {srows[0]['jobs']:,} | **{med([x['jobs_per_s'] for x in srows], rate_fmt)}** | "
                f"{med([x['server_us'] for x in srows], us_fmt)} | {med([x['server_busy'] for x in srows], pct_fmt)} | "
                f"{med([x['client_us'] for x in srows], us_fmt)} |"
            )
        per_round = [
            c["total"]["jobs_per_s"] / s["total"]["jobs_per_s"]
            for c, s in zip(cluster, solo, strict=False)
        ]
        busy = [c["total"]["client_busy"] for c in cluster]
        solo_busy = [s["total"]["client_busy"] for s in solo]
        single_busy = [s["total"]["client_busy"] for s in single]
        lines += [
            "",
            f"Per round, the cluster's total ÷ the standalone master's (the same worker processes): "
            f"{', '.join(f'{v:.2f}×' for v in per_round)}. The worker processes used "
            f"{med(busy, pct_fmt)} of a core together on the cluster, {med(solo_busy, pct_fmt)} on the "
            f"standalone master, and the lone worker {med(single_busy, pct_fmt)} (their CPU over the "
            "window ÷ its wall time).",
            "",
        ]
    if data["convert"]:
        lines += ["VTRR.CONVERT of the queues between the rounds (one command each; seconds):", ""]
        for c in data["convert"]:
            lines.append(
                "- to "
                + c["to"]
                + ": "
                + ", ".join(f"{k} {v:.2f} s" for k, v in c.items() if k != "to")
            )
        lines.append("")
    lines += [
        "## Fairness across shards: a light tenant arriving behind whales",
        "",
        f"{sizes['whales']} whales of {sizes['whale_items']:,} items each, drained by three worker processes; "
        f"light tenants arrive {ARRIVAL_GAP} s apart, {LIGHT_ITEMS} items each. *Wait*: from the light "
        "tenant's ENQUEUE being sent to its first item's lease (the worker's `leased` hook). *Items first*: "
        "leases between the two, in its own sub-queue and in all of them (a worker leases up to "
        f"{CONCURRENCY} ahead, so a round trip already under way when the tenant arrived counts too). "
        "*Bound*: one queue's, 2·P items of the P other partitions in its (sub-)queue. *Per item*: "
        "the other items its (sub-)queue leased between two of its items, and the time per item.",
        "",
        "| workers | whales per (sub-)queue | wait ms | items first, its (sub-)queue | bound 2·P | items first, all | per item: items between | per item: ms | whales still queued at the end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    labels = {
        "per-shard": "a worker per sub-queue (3)",
        "sharded": "3 ShardedQueue workers (weighted rotation)",
        "standalone": "3 workers, one queue, standalone master",
    }
    for result in data["fairness"]:
        served = [a for a in result["arrivals"] if "wait_ms" in a]
        not_served = len(result["arrivals"]) - len(served)
        bound = [2 * a["whales_own"] for a in served]
        lines.append(
            f"| {labels[result['variant']]} | {' / '.join(str(n) for n in result['whales_per_shard'])} | "
            f"{med([a.get('wait_sent_ms', a['wait_ms'] + (a['t0'] - a['sent']) * 1000) for a in served], us_fmt)} | {med([a['items_own'] for a in served], lambda v: f'{v:.0f}')} | "
            f"{med(bound, lambda v: f'{v:.0f}')} | {med([a['items_all'] for a in served], lambda v: f'{v:.0f}')} | "
            f"{med([a['per_item_items'] for a in served], lambda v: f'{v:.0f}')} | {med([a['per_item_ms'] for a in served], us_fmt)} | "
            f"{' / '.join(f'{n:,}' for n in result['backlog_at_end'])}"
            + (f" ({not_served} light tenants not served)" if not_served else "")
            + " |"
        )
    lines.append("")
    r = data["reshard"]
    lines += [
        "## Live reshard under load",
        "",
        f"A worker per sub-queue drained the {r['queued_before']:,} tenants' items left (keys layout); "
        f"{sizes['reshard_after']} s in, `{r['moved']}`'s slot {r['slot']} moved from master {r['source']} "
        f"to master {r['target']} (SETSLOT IMPORTING/MIGRATING, MIGRATE one key at a time, SETSLOT NODE on "
        "every master).",
        "",
    ]
    if "seconds" in r:
        longest = max(r["keys"], key=lambda kv: kv[1])
        lines += [
            "| what | figure |",
            "|---|---|",
            f"| the move, first SETSLOT to last | {r['seconds'] * 1000:.0f} ms |",
            f"| of which MIGRATE, {len(r['keys'])} keys | {r['migrate_seconds'] * 1000:.0f} ms |",
            f"| the longest MIGRATE (one key; both masters busy meanwhile) | {longest[1] * 1000:.0f} ms (`{longest[0]}`) |",
            f"| jobs/s in total: the second before / during the move / the second after | "
            f"{rate_fmt(r['before'] or 0)} / {rate_fmt(r['during'] or 0)} / {rate_fmt(r['after'] or 0)} |",
            f"| jobs/s of the moved sub-queue: before / during / after | "
            f"{rate_fmt(r['moved_before'] or 0)} / {rate_fmt(r['moved_during'] or 0)} / {rate_fmt(r['moved_after'] or 0)} |",
            f"| the lowest 100 ms of the move, all sub-queues | {rate_fmt(r['lowest_bucket'] or 0)} jobs/s |",
            f"| 100 ms buckets with nothing acked in the moved sub-queue during the move | {r['moved_idle_ms']} ms |",
            f"| the whole drain | {r['drained']:,} jobs in {r['drain_seconds']:.1f} s, {rate_fmt(r['drain_jobs_per_s'])} jobs/s |",
            "",
        ]
    v = data["verification"]
    lines += [
        "## Correctness (asserted)",
        "",
        f"- Every one of the {sizes['tenants']:,} tenants' jobs acked exactly once over the rounds and the "
        f"drain: {v['acked_once']:,} acked once, {v['doubled']} twice, {v['missing']} never, {v['extra']} unknown "
        f"(each worker records the ids whose ACK replied 1; every payload carried its id: {v['bad_payloads']} wrong).",
        "- Every sub-queue empty and VTRR.CHECK clean after the move: "
        + ", ".join(
            f"`{q}` acked-total {c['acked_total']:,}, CHECK {'clean' if not c['check'] else c['check']}"
            for q, c in v["sub_queues"].items()
        )
        + f"; the moved slot served by master {v['owner_after']} on every master's view.",
        f"- Standalone: {v['standalone']['acked']:,} acked, {v['standalone']['doubled']} twice, "
        f"{v['standalone']['queued']:,} still queued (acked + queued = {sizes['tenants']:,}), CHECK "
        f"{'clean' if not v['standalone']['check'] else v['standalone']['check']}. Fairness queues: no id "
        "acked twice, acked + queued + in flight = enqueued, CHECK clean.",
        "",
        "**"
        + (
            "All checks passed."
            if not data["failures"]
            else "FAILED: " + "; ".join(data["failures"])
        )
        + "**",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main()
    else:
        main()
