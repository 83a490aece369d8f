"""`vtrr`: run a worker, or look at a queue, from the command line.

    vtrr worker myapp.jobs:handle --queue files --concurrency 8
    vtrr stats files            vtrr partitions files
    vtrr dead files --count 20  vtrr revive files job-17 job-18

Tables for people, `--json` for scripts. The server comes from `--url` or
`VTRR_URL` (default redis://127.0.0.1:6379/0); `--cluster` for a Redis Cluster.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import redis

from .client import Queue
from .errors import VTRRError
from .types import DeadItem, PartitionView
from .worker import Backoff, Worker


def _client(args: argparse.Namespace) -> redis.Redis | redis.RedisCluster:
    if args.cluster:
        return redis.RedisCluster.from_url(args.url)
    return redis.Redis.from_url(args.url)


def _handler(spec: str) -> Any:
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise SystemExit(f"vtrr worker: handler must be module:function, not {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise SystemExit(f"vtrr worker: cannot load {spec!r}: {error}") from error


def _printable(value: Any) -> Any:
    """A JSON-ready value: bytes as text when UTF-8, else as base64 in a tagged object."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    return value


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [
        [("-" if row[c] is None else str(_printable(row[c]))) for c in columns] for row in rows
    ]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def _emit(
    args: argparse.Namespace, rows: list[dict[str, Any]], columns: Sequence[str], empty: str
) -> None:
    if args.json:
        print(json.dumps([{k: _printable(v) for k, v in row.items()} for row in rows], indent=2))
    elif rows:
        print(_table(rows, columns))
    else:
        print(empty)


def cmd_stats(args: argparse.Namespace) -> int:
    stats = dataclasses.asdict(Queue(_client(args), args.queue).stats())
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        width = max(len(k) for k in stats)
        for key, value in stats.items():
            print(f"{key.ljust(width)}  {'-' if value is None else value}")
    return 0


_PARTITION_COLUMNS = (
    "partition", "queued", "held", "leased", "delayed", "dead",
    "paused", "share", "concurrency_in_force", "virtual_time",
)  # fmt: skip


def cmd_partitions(args: argparse.Namespace) -> int:
    queue = Queue(_client(args), args.queue)
    views: list[PartitionView]
    if args.partition is not None:
        views = [queue.partition(args.partition)]
    else:
        views = sorted(queue.partitions(count=1000), key=lambda v: v.partition)
    _emit(args, [dataclasses.asdict(v) for v in views], _PARTITION_COLUMNS, "no partitions")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    items: list[DeadItem] = Queue(_client(args), args.queue).dead(args.count)
    columns = ("id", "partition", "weight", "timeouts", "nacks", "died_at_ms", "reason", "payload")
    _emit(args, [dataclasses.asdict(item) for item in items], columns, "no dead items")
    return 0


def cmd_revive(args: argparse.Namespace) -> int:
    revived = Queue(_client(args), args.queue).revive(*args.ids)
    print(
        json.dumps({"revived": revived}) if args.json else f"revived {revived} of {len(args.ids)}"
    )
    return 0 if revived == len(args.ids) else 1


def cmd_worker(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.path.insert(0, os.getcwd())
    handler = _handler(args.handler)
    try:
        worker = Worker(
            Queue(_client(args), args.queue),
            handler,
            concurrency=args.concurrency,
            lease_ms=args.lease_ms,
            block_ms=args.block_ms,
            backoff=Backoff(
                base_ms=args.backoff_ms, max_ms=max(args.backoff_ms, args.backoff_max_ms)
            ),
            grace_seconds=args.grace_seconds,
            exit_when_idle=args.exit_when_idle,
        )
    except (TypeError, ValueError) as error:
        print(f"vtrr worker: {error}", file=sys.stderr)
        return 2
    try:
        worker.run()
    except VTRRError as error:
        # A permanent error (module not loaded, wrong type, no permission):
        # one line and a failed exit, not a retry loop.
        print(f"vtrr worker: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="vtrr", description="A fair queue with leases, native in Redis."
    )
    top.add_argument("--url", default=os.environ.get("VTRR_URL", "redis://127.0.0.1:6379/0"))
    top.add_argument(
        "--cluster", action="store_true", help="the URL names a node of a Redis Cluster"
    )
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        each = sub.add_parser(name, help=help)
        each.add_argument("queue", help="the queue's name")
        each.add_argument("--json", action="store_true", help="machine-readable output")
        return each

    worker = sub.add_parser("worker", help="run module:function on every item")
    worker.add_argument("handler", help="module:function, called with a vtrr.worker.Job")
    worker.add_argument("--queue", required=True)
    worker.add_argument("--concurrency", type=int, default=1)
    worker.add_argument("--lease-ms", type=int, default=30_000)
    worker.add_argument("--block-ms", type=int, default=1_000)
    worker.add_argument(
        "--backoff-ms", type=int, default=1_000, help="first retry's delay, doubled each time"
    )
    worker.add_argument("--backoff-max-ms", type=int, default=3_600_000)
    worker.add_argument("--grace-seconds", type=float, default=30.0)
    worker.add_argument(
        "--exit-when-idle", action="store_true", help="stop once a lease finds nothing"
    )
    worker.add_argument("--log-level", default="INFO")
    worker.set_defaults(run=cmd_worker)
    command("stats", "the queue's counts").set_defaults(run=cmd_stats)
    partitions = command("partitions", "every partition's counts and settings")
    partitions.add_argument("--partition", help="only this one")
    partitions.set_defaults(run=cmd_partitions)
    dead = command("dead", "the oldest dead-lettered items")
    dead.add_argument("--count", type=int, default=10)
    dead.set_defaults(run=cmd_dead)
    revive = command("revive", "put dead items back in the queue")
    revive.add_argument("ids", nargs="+")
    revive.set_defaults(run=cmd_revive)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except redis.exceptions.ConnectionError as error:
        print(f"vtrr: cannot reach {args.url}: {error}", file=sys.stderr)
        return 2
    except VTRRError as error:
        print(f"vtrr: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
