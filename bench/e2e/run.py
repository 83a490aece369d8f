"""`make bench-e2e`: one worker process draining a queue, vtrr against BullMQ, Celery and RQ.

For each system and each row (a no-op handler at concurrency 8; a 2 ms
handler at concurrency 32) the driver flushes one redis-server (7.0,
Debian's, the module loaded, no persistence, pinned to CPU 0), fills the
queue with jobs of a 100-byte payload (vtrr: over 100 partitions; the
others have no partitions: plain jobs, BullMQ on one queue), then starts one
worker process (pinned to CPU 1). The worker first settles a warm-up
(E2E_WARMUP jobs, 5,000: Node's JIT makes BullMQ's first few thousand jobs
a third dearer than the rest, and a worker runs for hours), then the
measured E2E_JOBS; the window runs from the warm-up's last job settled
(acked, or its success recorded) to the last job's:

- jobs/s: jobs ÷ that wall time (the worker's monotonic clock);
- server CPU per job: `INFO cpu` used_cpu_sys + used_cpu_user, read when
  the worker says the window opens and again when it closes;
- client CPU per job: the worker process's CPU over the same window
  (getrusage RUSAGE_SELF / process.cpuUsage: every thread), and over its
  whole life, start-up, warm-up and exit included (RUSAGE_CHILDREN around
  it, divided by every job it settled);
- commands and socket writes per job the worker sent (its Redis client
  patched to count); for vtrr also round trips per job, exactly (calls of
  `Queue.exchange`: each is one pipeline or one command); a peer's round
  trips are at most its writes, which are at most its commands;
- from the server: commands executed (`total_commands_processed`, which
  also counts the commands a Lua script runs), read events
  (`total_reads_processed`), and `INFO commandstats` by name.

Every system takes its turn in each round (A, B, C, ..., then again);
the report gives medians, spreads (min–max over rounds) and per-round
ratios vtrr ÷ BullMQ. It measures and reports; it asserts no timing.

Sizes: E2E_JOBS (20,000) measured jobs after E2E_WARMUP (5,000) for vtrr
and BullMQ; E2E_SLOW_JOBS (5,000) after E2E_SLOW_WARMUP (500) for Celery
and RQ (hundreds to under two thousand jobs/s: per-job figures need no
more); E2E_ROUNDS (3). E2E_WARMUP=0 measures from the first handler's
start instead. E2E_SYSTEMS (native,keys,bullmq,celery,rq,node-native,
node-keys: the Node package's Worker, node/bench/e2e.ts) and E2E_ROWS
(noop,2ms) choose a subset. `--out` writes the Markdown report (`make
bench-e2e`: docs/e2e.md); the raw figures go to .bench/e2e.json.

`--profile` instead looks into one vtrr worker (native, no-op,
concurrency 8, E2E_PROFILE_JOBS, 50,000) beside BullMQ in each round: each
thread's CPU, the dispatcher's steps timed on its own CPU clock
(breakdown.py), and the same worker over hiredis (redis-py's C parser, in
.bench/tools) and with `single_connection_client=True`. It prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
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
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = ROOT / ".bench"
PACKAGE_PYTHON = ROOT / "python" / ".venv" / "bin" / "python"
PEERS = STATE / "peers"
PEERS_PYTHON = PEERS / "bin" / "python"
BULLMQ = HERE / "bullmq"
NODE_PACKAGE = ROOT / "node"
MODULE = ROOT / "target" / "release" / "libvtrr.so"
PARTITIONS = 100
PAYLOAD_BYTES = 100


def ensure_package_env() -> None:
    """Run under python/.venv (vtrr installed editable), making it as `make python-env` does."""
    try:
        import redis  # noqa: F401
        import vtrr  # noqa: F401

        if Path(sys.prefix).resolve() == (ROOT / "python" / ".venv").resolve():
            return
    except ImportError:
        pass
    subprocess.run(["bash", str(ROOT / "scripts" / "python-env.sh")], check=True)
    os.execv(PACKAGE_PYTHON, [str(PACKAGE_PYTHON), __file__, *sys.argv[1:]])


def ensure_bullmq() -> None:
    """`npm ci` into bench/e2e/bullmq/node_modules when it is missing or stale."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        sys.exit(
            "bench-e2e: BullMQ needs Node 20 or newer and npm (Debian: apt-get install nodejs npm)"
        )
    installed = BULLMQ / "node_modules" / ".package-lock.json"
    lock = BULLMQ / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    print("bench-e2e: npm ci (BullMQ)", flush=True)
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=BULLMQ, check=True
    )


def ensure_node_package() -> None:
    """The Node package's tools (`make node-env`: npm ci when stale) and its runner compiled."""
    subprocess.run(["make", "--no-print-directory", "node-env"], cwd=ROOT, check=True)
    subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=NODE_PACKAGE, check=True)


def ensure_peers(extra: list[str] | None = None) -> None:
    """Celery and RQ (bench/e2e/requirements.txt) in .bench/peers, with the package venv's Python."""
    requirements = HERE / "requirements.txt"
    stamp = PEERS / ".installed"
    if not (stamp.exists() and stamp.stat().st_mtime >= requirements.stat().st_mtime):
        print("bench-e2e: pip install -r bench/e2e/requirements.txt into .bench/peers", flush=True)
        shutil.rmtree(PEERS, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(PEERS)], check=True)
        pip = [str(PEERS_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(requirements)], check=True)
        stamp.touch()
    if extra:
        subprocess.run(
            [
                str(PEERS_PYTHON),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *extra,
            ],
            check=True,
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pinning() -> tuple[list[str], list[str]]:
    """taskset prefixes: the server on CPU 0, the worker on CPU 1 (none on one CPU)."""
    if shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2:
        return ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    return [], []


@dataclasses.dataclass(frozen=True)
class Row:
    key: str
    title: str
    sleep_ms: float
    concurrency: int


ROWS = [
    Row("noop", "no-op handler, concurrency 8", 0, 8),
    Row("2ms", "2 ms handler (a sleep), concurrency 32", 2, 32),
]


@dataclasses.dataclass(frozen=True)
class System:
    key: str
    label: str
    fill: list[str]
    work: Callable[[Row], list[str]]
    slow: bool = False  # E2E_SLOW_JOBS jobs
    layout: str | None = None  # vtrr's
    concurrent: bool = True  # False: one job at a time whatever the row says
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # the worker's only

    def worker_label(self, row: Row) -> str:
        if not self.concurrent:
            return f"{self.label} (one job at a time)"
        return f"{self.label} c{row.concurrency}"


def systems() -> list[System]:
    vtrr = [str(PACKAGE_PYTHON), str(HERE / "vtrr_runner.py")]
    node = ["node", str(BULLMQ / "runner.js")]
    vtrr_node = ["node", str(NODE_PACKAGE / "build" / "bench" / "e2e.js")]
    celery = [str(PEERS_PYTHON), str(HERE / "celery_runner.py")]
    rq = [str(PEERS_PYTHON), str(HERE / "rq_runner.py")]

    def celery_worker(row: Row) -> list[str]:
        return [
            str(PEERS_PYTHON), "-m", "celery", "-A", "celery_runner", "worker",
            "--pool", "threads", "--concurrency", str(row.concurrency), "-Q", "bench",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
            "--loglevel", "WARNING", "-n", "bench@%h",
        ]  # fmt: skip

    return [
        System("native", "vtrr.Worker native", [*vtrr, "fill"], lambda row: [*vtrr, "work"], layout="native"),
        System("keys", "vtrr.Worker keys", [*vtrr, "fill"], lambda row: [*vtrr, "work"], layout="keys"),
        System("bullmq", "BullMQ Worker (Node)", [*node, "fill"], lambda row: [*node, "work"]),
        System(
            "celery", "Celery (Redis broker, threads pool)", [*celery, "fill"], celery_worker,
            slow=True, env={"E2E_MODE": "work"},
        ),
        System("rq", "RQ SimpleWorker", [*rq, "fill"], lambda row: [*rq, "work"], slow=True, concurrent=False),
        System("node-native", "vtrr Worker (Node) native", [*vtrr_node, "fill"], lambda row: [*vtrr_node, "work"], layout="native"),
        System("node-keys", "vtrr Worker (Node) keys", [*vtrr_node, "fill"], lambda row: [*vtrr_node, "work"], layout="keys"),
    ]  # fmt: skip


class Server:
    """One redis-server with the module, no persistence, pinned to CPU 0."""

    def __init__(self, pin: list[str], logs: Path) -> None:
        import redis

        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="vtrr-e2e-")
        binary = os.environ.get("VTRR_REDIS_SERVER", "redis-server")
        command = [*pin, binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", self.dir]
        command += ["--logfile", str(logs / "redis-server.log"), "--loadmodule", str(MODULE)]
        self.process = subprocess.Popen(command)
        self.client = redis.Redis(port=self.port, socket_timeout=60)
        for _ in range(100):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"redis-server did not start (see {logs / 'redis-server.log'})")
        self.version = str(self.client.info("server")["redis_version"])

    def snapshot(self) -> dict[str, Any]:
        info = self.client.execute_command("INFO", "cpu", "stats", "commandstats")
        return {
            "cpu": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            "commands": int(info["total_commands_processed"]),
            "reads": int(info["total_reads_processed"]),
            "commandstats": {
                key.removeprefix("cmdstat_"): int(value["calls"])
                for key, value in info.items()
                if key.startswith("cmdstat_")
            },
        }

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_logged(command: list[str], env: dict[str, str], log: Path, timeout: float) -> None:
    with log.open("wb") as out:
        done = subprocess.run(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{tail(log)}")


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def measure(
    server: Server,
    system: System,
    row: Row,
    jobs: int,
    worker_pin: list[str],
    logs: Path,
    tag: str,
    warmup: int = 0,
) -> dict[str, Any]:
    """Fill, then one worker process's drain: the figures per job."""
    timeout = float(os.environ.get("E2E_TIMEOUT", "600"))
    server.client.flushall()
    if system.layout:
        server.client.config_set("vtrr.default-layout", system.layout)
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "E2E_PORT": str(server.port),
        "E2E_JOBS": str(jobs),
        "E2E_WARMUP": str(warmup),
        "E2E_CONCURRENCY": str(row.concurrency),
        "E2E_SLEEP_MS": str(row.sleep_ms),
        "E2E_PARTITIONS": str(PARTITIONS),
        "E2E_PAYLOAD_BYTES": str(PAYLOAD_BYTES),
    }
    run_logged([*worker_pin, *system.fill], env, logs / f"{tag}-fill.log", timeout)
    if system.layout:
        import vtrr

        stats = vtrr.Queue(server.client, "bench").stats()
        assert stats.queued == warmup + jobs and str(stats.layout) == system.layout, stats

    read_end, write_end = os.pipe()
    env = {**env, **system.env, "E2E_FD": str(write_end)}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = logs / f"{tag}-work.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*worker_pin, *system.work(row)],
            env=env, cwd=HERE, pass_fds=(write_end,), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    os.close(write_end)
    first = last = None
    spent: dict[str, float] = {}
    buffer = b""
    deadline = time.monotonic() + timeout
    try:
        while last is None:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RuntimeError(f"{tag}: no end after {timeout} s:\n{tail(log)}")
            chunk = os.read(read_end, 65536)
            if not chunk:
                raise RuntimeError(
                    f"{tag}: the worker ended before the queue drained:\n{tail(log)}"
                )
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line == b"first":
                    first = server.snapshot()
                else:
                    last = server.snapshot()
                    spent = json.loads(line)["done"]
        worker.wait(timeout=60)
    finally:
        os.close(read_end)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert first is not None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    # The driver's own INFO between the two snapshots: one command, one read.
    stats_delta = Counter(last["commandstats"])
    stats_delta.subtract(first["commandstats"])
    stats_delta["info"] -= 1
    return {
        "system": system.key,
        "row": row.key,
        "jobs": jobs,
        "seconds": spent["seconds"],
        "jobs_per_s": jobs / spent["seconds"],
        "server_us": (last["cpu"] - first["cpu"]) * 1e6 / jobs,
        "client_us": spent["cpu_seconds"] * 1e6 / jobs,
        "client_process_us": process_cpu * 1e6 / (warmup + jobs),
        "warmup": warmup,
        "commands": spent["commands"] / jobs,
        "sends": spent["sends"] / jobs,
        "round_trips": spent["exchanges"] / jobs if system.layout else None,
        "server_commands": (last["commands"] - first["commands"] - 1) / jobs,
        "server_reads": (last["reads"] - first["reads"] - 1) / jobs,
        "commandstats": {name: calls / jobs for name, calls in stats_delta.items() if calls > 0},
        "worker_exit": worker.returncode,
    }


def versions(server: Server) -> dict[str, str]:
    def peer(package: str) -> str:
        code = f"import importlib.metadata as m; print(m.version({package!r}))"
        if not PEERS_PYTHON.exists():
            return "not installed"
        done = subprocess.run([str(PEERS_PYTHON), "-c", code], capture_output=True, text=True)
        return done.stdout.strip() or "not installed"

    def package_json(name: str) -> str:
        path = BULLMQ / "node_modules" / name / "package.json"
        return str(json.loads(path.read_text())["version"]) if path.exists() else "not installed"

    import importlib.metadata

    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "redis-server": server.version,
        "vtrr (module and package)": f"{git}{' + uncommitted changes' if dirty else ''}",
        "redis-py (vtrr's)": importlib.metadata.version("redis"),
        "Python": platform.python_version(),
        "BullMQ": package_json("bullmq"),
        "ioredis": package_json("ioredis"),
        "node-redis (vtrr Node's)": json.loads(
            (NODE_PACKAGE / "node_modules" / "redis" / "package.json").read_text()
        )["version"]
        if (NODE_PACKAGE / "node_modules" / "redis" / "package.json").exists()
        else "not installed",
        "Node": node,
        "Celery": peer("celery"),
        "kombu": peer("kombu"),
        "RQ": peer("rq"),
        "redis-py (Celery's, RQ's)": peer("redis"),
    }


def machine() -> dict[str, str]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model,
        "cpus": str(os.cpu_count()),
        "kernel": platform.release(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


# The report.
METRICS = [
    ("jobs_per_s", "jobs/s"),
    ("server_us", "server CPU µs/job"),
    ("client_us", "client CPU µs/job"),
    ("round_trips", "round trips/job"),
    ("commands", "commands sent/job"),
    ("sends", "socket writes/job"),
    ("server_commands", "server commands/job"),
    ("server_reads", "server reads/job"),
    ("client_process_us", "client CPU µs/job, whole process"),
]
# Issue #31's targets for the no-op row: (what, system, metric, bound, kind).
EARLIER_CLIENT_US = (64.0, 117.0)


def number(value: float, metric: str) -> str:
    if metric == "jobs_per_s":
        return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"
    if metric.endswith("_us"):
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def cell(values: list[float], metric: str) -> str:
    if not values:
        return "—"
    median = statistics.median(values)
    if len(values) == 1:
        return number(median, metric)
    return f"{number(median, metric)} ({number(min(values), metric)}–{number(max(values), metric)})"


def ratio(value: float) -> str:
    return f"{value:.2f}×"


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    sys_by_key = {system.key: system for system in systems()}
    rounds = meta["rounds"]
    lines = [
        "# End to end: one worker process draining a queue (`make bench-e2e`)",
        "",
        "Written by `make bench-e2e` ([bench/e2e/run.py](../bench/e2e/run.py) says exactly what it "
        "measures); the narrative and issue #31's targets are in "
        "[performance.md](performance.md#end-to-end-the-worker-against-bullmq-celery-and-rq).",
        "",
        f"Run of {meta['machine']['date']} on {meta['machine']['cpu']} ({meta['machine']['cpus']} CPUs, "
        f"Linux {meta['machine']['kernel']}): {rounds} interleaved rounds; the server "
        f"{meta['pinning']}. Each job has a {PAYLOAD_BYTES}-byte payload (vtrr: over "
        f"{PARTITIONS} partitions; the others have none: plain jobs); one worker process "
        f"settles a warm-up ({meta['warmup']:,} jobs for vtrr and BullMQ, "
        f"{meta['slow_warmup']:,} for Celery and RQ), then the {meta['jobs']:,} "
        f"({meta['slow_jobs']:,}) measured ones. Each cell: the median over rounds (min–max).",
        "",
        "- **jobs/s**: measured jobs ÷ the wall time from the warm-up's last job settled to the "
        "last job's (vtrr: its ACK replied; BullMQ: `completed`; Celery: acknowledged, "
        "`acks_late`; RQ: success recorded).",
        "- **server CPU µs/job**: `INFO cpu` (used_cpu_sys + used_cpu_user) over that window.",
        "- **client CPU µs/job**: the worker process's CPU (every thread) over that window; "
        "*whole process*: its whole life, start-up and exit included (RUSAGE_CHILDREN), ÷ every "
        "job it settled, warm-up included.",
        "- **round trips/job**: vtrr's exactly (calls of `Queue.exchange`, each one pipeline or "
        "one command); for the others a round trip is at most a socket write, and a write at most "
        "a command, so their *socket writes/job* bounds their round trips from above.",
        "- **commands sent/job**: counted in the worker's client (a pipeline's each); "
        "**server commands/job**: `total_commands_processed`, which also counts what a Lua "
        "script runs (BullMQ's scripts) but not what a module command does inside; "
        "**server reads/job**: `total_reads_processed`, read events on the server's sockets.",
        "",
    ]
    for row in ROWS:
        row_results = [result for result in results if result["row"] == row.key]
        if not row_results:
            continue
        lines += [f"## {row.title[0].upper()}{row.title[1:]}", ""]
        header = "| system | " + " | ".join(title for _, title in METRICS) + " |"
        lines += [header, "|---" * (len(METRICS) + 1) + "|"]
        present = [key for key in sys_by_key if any(r["system"] == key for r in row_results)]
        for key in present:
            mine = [r for r in row_results if r["system"] == key]
            cells = []
            for metric, _ in METRICS:
                values = [r[metric] for r in mine if r[metric] is not None]
                cells.append(cell(values, metric))
            jobs = mine[0]["jobs"]
            lines.append(
                f"| {sys_by_key[key].worker_label(row)}, {jobs:,} jobs | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
        per_round = ratios(row_results)
        if per_round:
            lines += [
                "Per round, vtrr ÷ BullMQ (jobs/s: above 1 vtrr is faster; CPU per job: below 1 "
                "vtrr spends less):",
                "",
                "| ratio | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " | median |",
                "|---" * (rounds + 2) + "|",
            ]
            for name, values in per_round.items():
                lines.append(
                    f"| {name} | "
                    + " | ".join(ratio(v) for v in values)
                    + f" | {ratio(statistics.median(values))} |"
                )
            lines.append("")
        if row.key == "noop" and per_round:
            lines += targets(row_results, per_round)
        lines += ["Commands per job by name, from the server's `INFO commandstats` (medians; "
                  "a Lua script's commands included):", ""]  # fmt: skip
        for key in present:
            mine = [r for r in row_results if r["system"] == key]
            names = sorted({name for r in mine for name in r["commandstats"]})
            medians = {
                name: statistics.median(r["commandstats"].get(name, 0.0) for r in mine)
                for name in names
            }
            shown = ", ".join(
                f"{name} {value:.2f}"
                for name, value in sorted(medians.items(), key=lambda kv: -kv[1])
                if value >= 0.005
            )
            lines.append(f"- {sys_by_key[key].label}: {shown or '—'}")
        lines.append("")
    lines += ["## Versions", "", "| what | version |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in meta["versions"].items()]
    lines += [
        "",
        "Settings: vtrr.Worker as the README shows it (threads, lease 30 s, block 1 s, no logging "
        "configured); BullMQ's Worker with its defaults, jobs added with `removeOnComplete`; "
        "Celery `--pool threads`, `acks_late`, no result backend, `--without-mingle --without-gossip "
        "--without-heartbeat`, default prefetch (4 per thread); RQ `SimpleWorker` in burst mode, "
        "`result_ttl=0`. A finished job is deleted in every system.",
        "",
    ]
    return "\n".join(lines)


def ratios(row_results: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-round ratios vtrr ÷ BullMQ, in round order."""

    def series(key: str, metric: str) -> list[float]:
        return [r[metric] for r in row_results if r["system"] == key]

    bull = {metric: series("bullmq", metric) for metric in ("jobs_per_s", "server_us", "client_us")}
    out: dict[str, list[float]] = {}
    for key, label in (
        ("native", "native"),
        ("keys", "keys"),
        ("node-native", "Node native"),
        ("node-keys", "Node keys"),
    ):
        for metric, title in (
            ("jobs_per_s", "jobs/s"),
            ("server_us", "server CPU/job"),
            ("client_us", "client CPU/job"),
        ):
            mine = series(key, metric)
            if mine and len(mine) == len(bull[metric]):
                out[f"{label} {title}"] = [a / b for a, b in zip(mine, bull[metric], strict=True)]
    return out


def targets(row_results: list[dict[str, Any]], per_round: dict[str, list[float]]) -> list[str]:
    def verdict(values: list[float], good: Callable[[float], bool]) -> str:
        hits = sum(1 for value in values if good(value))
        if hits == len(values):
            return "met in every round"
        if good(statistics.median(values)):
            return f"met on the median ({hits} of {len(values)} rounds)"
        return f"not met ({hits} of {len(values)} rounds)"

    lines = [
        "Issue #31's targets for this row:",
        "",
        "| target | measured, median (per round) | |",
        "|---|---|---|",
    ]

    def add(
        target: str, values: list[float], good: Callable[[float], bool], fmt: Callable[[float], str]
    ) -> None:
        if values:
            shown = f"{fmt(statistics.median(values))} ({', '.join(fmt(v) for v in values)})"
            lines.append(f"| {target} | {shown} | {verdict(values, good)} |")

    add(
        "native jobs/s ≥ 1.5× BullMQ's",
        per_round.get("native jobs/s", []),
        lambda v: v >= 1.5,
        ratio,
    )
    add("keys jobs/s ≥ 1.0× BullMQ's", per_round.get("keys jobs/s", []), lambda v: v >= 1.0, ratio)
    for layout in ("native", "keys"):
        add(f"{layout} server CPU/job ≤ 1/3 of BullMQ's", per_round.get(f"{layout} server CPU/job", []),
            lambda v: v <= 1 / 3, ratio)  # fmt: skip
    for layout in ("native", "keys"):
        trips = [r["round_trips"] for r in row_results if r["system"] == layout]
        add(f"{layout} round trips/job ≤ 0.5", trips, lambda v: v <= 0.5, lambda v: f"{v:.3f}")
    low, high = EARLIER_CLIENT_US
    for layout in ("native", "keys"):
        client = [r["client_us"] for r in row_results if r["system"] == layout]
        add(f"{layout} client CPU/job halved: ≤ {low / 2:.0f} µs (half the earlier {low:.0f}–{high:.0f})",
            client, lambda v: v <= low / 2, lambda v: f"{v:.1f} µs")  # fmt: skip
    lines.append("")
    return lines


PROFILE_VARIANTS = [
    # (label, the worker's Python, E2E_VTRR_CLIENT, steps timed)
    (
        "as benchmarked (redis-py's pure-Python RESP3 parser, a connection pool)",
        "package",
        "pool",
        False,
    ),
    ("the same, each step of the dispatcher timed (breakdown.py)", "package", "pool", True),
    ("with hiredis (redis-py's C parser)", "tools", "pool", False),
    ("single_connection_client=True (no pool check per call)", "package", "single", False),
    ("hiredis and single_connection_client=True", "tools", "single", False),
]


def profile(worker_pin: list[str], server_pin: list[str], logs: Path) -> None:
    """Where one vtrr worker's CPU goes (native, no-op, concurrency 8): per thread, per step,
    and what redis-py's C parser and a pool-less client change. Prints; writes nothing else."""
    import redis

    tools = STATE / "tools"
    tools_python = tools / "bin" / "python"
    if not (tools / ".installed").exists():
        print("bench-e2e: a venv with redis-py and hiredis in .bench/tools", flush=True)
        shutil.rmtree(tools, ignore_errors=True)
        subprocess.run(
            [getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(tools)], check=True
        )
        subprocess.run(
            [str(tools / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
             f"redis=={redis.__version__}", "hiredis==3.3.0"],
            check=True,
        )  # fmt: skip
        (tools / ".installed").touch()
    jobs = int(os.environ.get("E2E_PROFILE_JOBS", "50000"))
    warmup = int(os.environ.get("E2E_WARMUP", "5000"))
    rounds = int(os.environ.get("E2E_ROUNDS", "3"))
    row = ROWS[0]
    native = systems()[0]
    found: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in PROFILE_VARIANTS}
    ensure_bullmq()
    bullmq = systems()[2]
    reference: list[float] = []  # BullMQ's jobs/s in each round, for the ratios
    server = Server(server_pin, logs)
    try:
        for number_ in range(rounds):
            done = measure(
                server,
                bullmq,
                row,
                jobs,
                worker_pin,
                logs,
                f"profile-r{number_ + 1}-bullmq",
                warmup,
            )
            reference.append(done["jobs_per_s"])
            print(f"round {number_ + 1} BullMQ: {done['jobs_per_s']:.0f} jobs/s", flush=True)
            for index, (label, python, client, steps) in enumerate(PROFILE_VARIANTS):
                out = logs / f"profile-{index}.json"
                interpreter = PACKAGE_PYTHON if python == "package" else tools_python
                env = {"E2E_BREAKDOWN": str(out), "E2E_VTRR_CLIENT": client}
                if steps:
                    env["E2E_STEPS"] = "1"
                if python == "tools":  # the package from the source tree, over hiredis
                    env["PYTHONPATH"] = f"{HERE}:{ROOT / 'python' / 'src'}"
                variant = dataclasses.replace(
                    native,
                    work=lambda _row, interpreter=interpreter: [
                        str(interpreter),
                        str(HERE / "vtrr_runner.py"),
                        "work",
                    ],
                    env=env,
                )
                tag = f"profile-r{number_ + 1}-{index}"
                result = measure(server, variant, row, jobs, worker_pin, logs, tag, warmup)
                result["breakdown"] = json.loads(out.read_text())
                found[label].append(result)
                print(
                    f"round {number_ + 1} variant {index}: {result['jobs_per_s']:.0f} jobs/s, client {result['client_us']:.1f} µs/job",
                    flush=True,
                )
    finally:
        server.close()
    print(
        f"\nvtrr.Worker, native, no-op, concurrency 8, {jobs:,} jobs, medians of {rounds} rounds:\n"
    )
    print(
        f"BullMQ (the same jobs, in each round): {statistics.median(reference) / 1000:.1f}k jobs/s\n"
    )
    print(
        "| variant | jobs/s | ÷ BullMQ's | client CPU µs/job | dispatcher thread µs/job | 8 handler threads µs/job | round trips/job | server CPU µs/job |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, results in found.items():

        def med(
            pick: Callable[[dict[str, Any]], float], results: list[dict[str, Any]] = results
        ) -> float:
            return statistics.median(pick(r) for r in results)

        dispatcher = med(lambda r: r["breakdown"]["threads_us"].get("MainThread", 0.0))
        handlers = med(
            lambda r: sum(
                v for k, v in r["breakdown"]["threads_us"].items() if k.startswith("vtrr-worker")
            )
        )
        versus = statistics.median(
            r["jobs_per_s"] / bull for r, bull in zip(results, reference, strict=True)
        )
        print(
            f"| {label} | {med(lambda r: r['jobs_per_s']) / 1000:.1f}k | {versus:.2f}× | {med(lambda r: r['client_us']):.1f} "
            f"| {dispatcher:.1f} | {handlers:.1f} | {med(lambda r: r['round_trips']):.3f} | {med(lambda r: r['server_us']):.1f} |"
        )
    timed = found[PROFILE_VARIANTS[1][0]]
    names = list(timed[0]["breakdown"]["steps_us"])
    dispatcher = statistics.median(r["breakdown"]["threads_us"]["MainThread"] for r in timed)
    print(
        f"\nThe dispatcher thread's {dispatcher:.1f} µs/job (steps timed; calls per job; medians):\n"
    )
    for name in names:
        value = statistics.median(r["breakdown"]["steps_us"][name] for r in timed)
        per = statistics.median(r["breakdown"]["calls_per_job"][name] for r in timed)
        print(f"  {value:6.1f} µs/job  {per:5.2f} calls/job  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--profile", action="store_true", help="profile one vtrr worker instead")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from .bench/e2e.json"
    )
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads((STATE / "e2e.json").read_text())
        text = report(saved["results"], saved["meta"])
        if args.out:
            args.out.write_text(text)
        else:
            print(text)
        return
    ensure_package_env()
    if not MODULE.exists():
        sys.exit(f"bench-e2e: {MODULE} is missing: cargo build --release (make release)")
    logs = STATE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server_pin, worker_pin = pinning()
    if args.profile:
        profile(worker_pin, server_pin, logs)
        return
    wanted_systems = os.environ.get(
        "E2E_SYSTEMS", "native,keys,bullmq,celery,rq,node-native,node-keys"
    ).split(",")
    wanted_rows = os.environ.get("E2E_ROWS", "noop,2ms").split(",")
    chosen = [system for system in systems() if system.key in wanted_systems]
    rows = [row for row in ROWS if row.key in wanted_rows]
    if any(system.key == "bullmq" for system in chosen):
        ensure_bullmq()
    if any(system.key in ("celery", "rq") for system in chosen):
        ensure_peers()
    if any(system.key.startswith("node-") for system in chosen):
        ensure_node_package()
    jobs = int(os.environ.get("E2E_JOBS", "20000"))
    slow_jobs = int(os.environ.get("E2E_SLOW_JOBS", "5000"))
    warmup = int(os.environ.get("E2E_WARMUP", "5000"))
    slow_warmup = int(os.environ.get("E2E_SLOW_WARMUP", "500"))
    rounds = int(os.environ.get("E2E_ROUNDS", "3"))
    server = Server(server_pin, logs)
    results: list[dict[str, Any]] = []
    try:
        meta = {
            "machine": machine(),
            "versions": versions(server),
            "rounds": rounds,
            "jobs": jobs,
            "slow_jobs": slow_jobs,
            "warmup": warmup,
            "slow_warmup": slow_warmup,
            "pinning": "pinned to CPU 0 and the worker to CPU 1 (taskset)"
            if worker_pin
            else "and the worker unpinned (fewer than 2 CPUs)",
        }
        for number_ in range(rounds):
            for row in rows:
                for system in chosen:
                    count = slow_jobs if system.slow else jobs
                    tag = f"r{number_ + 1}-{row.key}-{system.key}"
                    before = slow_warmup if system.slow else warmup
                    result = measure(server, system, row, count, worker_pin, logs, tag, before)
                    result["round"] = number_ + 1
                    results.append(result)
                    print(
                        f"round {number_ + 1} {row.key:>4} {system.key:>6}: {result['jobs_per_s']:8.0f} jobs/s  "
                        f"server {result['server_us']:6.1f} µs/job  client {result['client_us']:6.1f} µs/job  "
                        f"cmds {result['commands']:.2f}/job  writes {result['sends']:.2f}/job"
                        + (
                            f"  round trips {result['round_trips']:.3f}/job"
                            if result["round_trips"] is not None
                            else ""
                        ),
                        flush=True,
                    )
    finally:
        server.close()
    (STATE / "e2e.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    text = report(results, meta)
    if args.out:
        args.out.write_text(text)
        print(f"bench-e2e: wrote {args.out}")
    else:
        print(text)


if __name__ == "__main__":
    main()
