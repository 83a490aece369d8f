"""`vtrr`: run a worker, look at a queue, or steer it, from the command line.

    vtrr worker myapp.jobs:handle files --concurrency 8
    vtrr stats files            vtrr partitions files
    vtrr dead files --count 20  vtrr revive files job-17 job-18
    vtrr pause files alice      vtrr resume files alice
    vtrr limit files alice --concurrency 2 --share 3
    vtrr policy files --max-nacks 5   vtrr policy files --result-ttl-ms 86400000
    vtrr job files job-17       vtrr result files job-17 --wait 30
    vtrr cancel files job-17    vtrr enqueue files alice job-19 --payload '{"a": 1}'
    vtrr schedule files nightly --cron '0 3 * * *' --tz Europe/Paris --partition ops --payload x
    vtrr schedules files --runs 3   vtrr unschedule files nightly
    vtrr stats files --watch    vtrr partitions files --top 20 --by oldest
    vtrr top files              vtrr exporter --port 9808      vtrr web files

Tables for people, `--json` for scripts. The server comes from `--url` or
`VTRR_URL` (default redis://127.0.0.1:6379/0); `--cluster` for a Redis Cluster.
The options that are not a verb's own (`--url`, `--cluster`, `--json`) go
before the verb or after it: an operator edits the end of a command line.
Exit status: 0 done; 1 something named was not there (a queue, an id, a
schedule); 2 an error (bad input, no server, no module), one line on stderr.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib
import importlib.metadata
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import redis

from .client import Queue, server_of
from .commands import Limit
from .errors import NoPermission, VTRRError
from .types import (
    MISSED,
    RANKS,
    DeadItem,
    Item,
    JobStatus,
    PartitionView,
    Rank,
    Rate,
    ScheduleView,
    encode,
)
from .worker import LOG_FORMAT, Backoff, Worker


class _Refused(Exception):
    """A verb's own one-line refusal (exit status 2)."""


class _Missing(Exception):
    """What a verb was to read or change is not there: one line, exit status 1."""


def _client(args: argparse.Namespace) -> redis.Redis | redis.RedisCluster:
    try:
        if args.cluster:
            return redis.RedisCluster.from_url(args.url)
        return redis.Redis.from_url(args.url)
    except ValueError as error:  # redis-py's word on a URL it cannot read
        raise _Refused(f"vtrr: --url (or VTRR_URL) {args.url!r}: {error}") from None


def _handler(spec: str) -> Any:
    """The handler `module:function` names, imported; a refusal when it cannot be."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise _Refused(
            f"vtrr worker: the handler is module:function (myapp.jobs:handle), not {spec!r}"
        )
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise _Refused(f"vtrr worker: cannot load {spec!r}: {error}") from None
    if not callable(handler):
        raise _Refused(f"vtrr worker: {spec!r} is a {type(handler).__name__}, not a function")
    return handler


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


def _record(args: argparse.Namespace, record: dict[str, Any], missing: str = "-") -> None:
    """One record: `key  value` lines for people (None as `missing`), an object for scripts."""
    if args.json:
        print(json.dumps({k: _printable(v) for k, v in record.items()}, indent=2))
    else:
        width = max(len(k) for k in record)
        for key, value in record.items():
            print(f"{key.ljust(width)}  {missing if value is None else _printable(value)}")


def _say(args: argparse.Namespace, record: dict[str, Any], line: str) -> None:
    """What a verb did: a sentence for people, an object for scripts."""
    print(json.dumps({k: _printable(v) for k, v in record.items()}) if args.json else line)


def _queue(args: argparse.Namespace) -> Queue:
    """The queue named, as it is: what `enqueue` and `schedule` add makes it."""
    return Queue(_client(args), args.queue)


def _existing(args: argparse.Namespace, *, changes: bool = False) -> Queue:
    """The queue named, which must exist (have a key): the module answers for a
    missing queue as for an empty one and a change makes it, so a mistyped
    name would pass unnoticed. `--create` (on the verbs that change
    settings) goes ahead all the same."""
    queue = _queue(args)
    try:
        if getattr(args, "create", False) or queue.exists():
            return queue
    except NoPermission:  # a user given the vtrr commands only (a monitor): not asked
        return queue
    queue.stats()  # on a server without the module, that is what to say
    hint = ": nothing changed (--create to go ahead)" if changes else ""
    raise _Missing(
        f"vtrr {args.command}: no queue named {args.queue!r} on {server_of(queue.client)}{hint}"
    )


def _flat_totals(record: dict[str, Any]) -> dict[str, Any]:
    """A record's `totals` as `<name>_total` fields, for people (scripts get the object)."""
    flat = {key: value for key, value in record.items() if key != "totals"}
    flat.update({f"{name}_total": count for name, count in record["totals"].items()})
    return flat


def _watched(args: argparse.Namespace, draw: Callable[[], None]) -> int:
    """`draw` once, or with `--watch` every N seconds until Ctrl-C.

    On a terminal each draw replaces the last (with a line saying when);
    into a pipe or a file, draws follow one another, a blank line between.
    """
    if args.watch is None:
        draw()
        return 0
    terminal = sys.stdout.isatty()
    try:
        while True:
            if terminal:
                print("\x1b[H\x1b[2J", end="")  # cursor home, clear the screen
                print(f"every {args.watch:g} s, {time.strftime('%H:%M:%S')} (Ctrl-C to stop)\n")
            draw()
            if not terminal:
                print()
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def cmd_stats(args: argparse.Namespace) -> int:
    queue = _existing(args)

    def draw() -> None:
        stats = dataclasses.asdict(queue.stats())
        _record(args, stats if args.json else _flat_totals(stats))

    return _watched(args, draw)


_PARTITION_COLUMNS = (
    "partition", "queued", "held", "leased", "delayed", "dead",
    "paused", "share", "concurrency_in_force", "max_queued_in_force", "virtual_time", "waiting_ms",
    "enqueued_total", "leased_total", "acked_total", "nacked_total", "dead_total",
    "expired_total",
)  # fmt: skip


def cmd_partitions(args: argparse.Namespace) -> int:
    if args.top is None and (args.by is not None or args.offset is not None):
        raise _Refused("vtrr partitions: --by and --offset go with --top")
    queue = _existing(args)

    def draw() -> None:
        views: list[PartitionView]
        ranking = ""
        if args.partition is not None:
            views = [queue.partition(args.partition)]
        elif args.top is not None:
            by: Rank = args.by or "queued"
            offset: int = args.offset or 0
            ranked, views = queue.partitions_top(args.top, by, offset)
            ranking = f"{offset + 1}-{offset + len(views)} of {ranked} ranked by {by}"
        else:
            views = sorted(queue.partitions(count=1000), key=lambda v: v.partition)
        rows = [dataclasses.asdict(v) for v in views]
        shown = rows if args.json else [_flat_totals(row) for row in rows]
        _emit(args, shown, _PARTITION_COLUMNS, "no partitions")
        if ranking and views and not args.json:
            print(ranking)

    return _watched(args, draw)


def _with_errors(
    args: argparse.Namespace, items: Sequence[DeadItem | JobStatus]
) -> list[dict[str, Any]]:
    """Rows of `items`, each `last_error` cut to its first line in a table:
    a row is one line, and the first is the error's summary (--json has it whole)."""
    rows = [dataclasses.asdict(item) for item in items]
    if not args.json:
        for row in rows:
            error = row["last_error"]
            row["last_error"] = None if error is None else (error.splitlines() or [""])[0]
    return rows


def cmd_dead(args: argparse.Namespace) -> int:
    items: list[DeadItem] = _existing(args).dead(args.count)
    rows = _with_errors(args, items)
    columns = (
        "id", "partition", "weight", "timeouts", "nacks", "died_at_ms", "reason", "last_error",
        "payload",
    )  # fmt: skip
    _emit(args, rows, columns, "no dead items")
    return 0


_RESULT_CELL = 40  # the characters of a result a table shows


def _result_cell(result: bytes | None) -> str | None:
    """A job's result in a table: its first line, cut to `_RESULT_CELL`
    characters (`vtrr result` and --json show it whole)."""
    if result is None:
        return None
    text = (result.decode("utf-8", "backslashreplace").splitlines() or [""])[0]
    return text if len(text) <= _RESULT_CELL else text[: _RESULT_CELL - 3] + "..."


def cmd_job(args: argparse.Namespace) -> int:
    jobs: list[JobStatus] = _existing(args).jobs(*args.ids)
    rows = _with_errors(args, jobs)
    if not args.json:
        for row in rows:
            row["result"] = _result_cell(row["result"])
    columns = (
        "id", "state", "partition", "weight", "priority", "timeouts", "nacks", "expires_ms",
        "due_ms", "dead_ms", "reason", "last_error", "finished_ms", "result",
    )  # fmt: skip
    _emit(args, rows, columns, "no ids")
    # Like `test -e`: 1 when an id is unknown to the queue (never there, or
    # finished with nothing of it kept).
    return 1 if any(job.state == "unknown" for job in jobs) else 0


def cmd_result(args: argparse.Namespace) -> int:
    """A finished job's status and result, whole; with --wait, once it finishes."""
    queue = _existing(args)
    block_ms = None if args.wait is None else math.ceil(args.wait * 1000)
    status = queue.result(args.id, block_ms=block_ms)
    if status is None:
        waited = "" if args.wait is None else f" within {args.wait:g} s"
        raise _Missing(
            f"vtrr result: {args.id} has not finished{waited}, or nothing of it is kept"
            " (vtrr policy --result-ttl-ms)"
        )
    _record(args, dataclasses.asdict(status))
    return 0


def cmd_revive(args: argparse.Namespace) -> int:
    revived = _existing(args).revive(*args.ids)
    print(
        json.dumps({"revived": revived}) if args.json else f"revived {revived} of {len(args.ids)}"
    )
    return 0 if revived == len(args.ids) else 1


def cmd_cancel(args: argparse.Namespace) -> int:
    cancelled = _existing(args).cancel(*args.ids)
    _say(args, {"cancelled": cancelled}, f"cancelled {cancelled} of {len(args.ids)}")
    return 0 if cancelled == len(args.ids) else 1


def cmd_pause(args: argparse.Namespace) -> int:
    changed = _existing(args, changes=True).pause(args.partition)
    line = f"paused {args.partition}" if changed else f"{args.partition} was already paused"
    _say(args, {"partition": args.partition, "paused": True, "changed": changed}, line)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    changed = _existing(args, changes=True).resume(args.partition)
    line = f"resumed {args.partition}" if changed else f"{args.partition} was not paused"
    _say(args, {"partition": args.partition, "paused": False, "changed": changed}, line)
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """Set what was given, then show the partition's settings as they now are."""
    args.rate = _with_burst(args.rate, args.burst, "vtrr limit: --burst needs --rate N/MS")
    given = {
        "concurrency": args.concurrency,
        "share": args.share,
        "rate": args.rate,
        "max_queued": args.max_queued,
    }
    changes = any(value is not None for value in given.values())
    queue = _existing(args, changes=changes)
    if changes:
        queue.set_limit(args.partition, **given)
    settings = dataclasses.asdict(queue.limit(args.partition))
    _flatten_rate(settings, "rate", "burst")
    _record(args, {"partition": args.partition, **settings}, missing="none")
    return 0


def _with_burst(
    rate: Rate | Literal["NONE"] | None, burst: int | None, usage: str
) -> Rate | Literal["NONE"] | None:
    """`rate` with `burst` as its burst; exit 2 saying `usage` for a burst without a rate."""
    if burst is None:
        return rate
    if not isinstance(rate, Rate):
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    return dataclasses.replace(rate, burst=burst)


def _flatten_rate(record: dict[str, Any], field: str, burst: str) -> None:
    """A rate as shown: `N/MS` in `field`, its burst in `burst`."""
    rate = record.pop(field)
    record[field] = None if rate is None else f"{rate['amount']}/{rate['per_ms']}"
    record[burst] = None if rate is None else rate["burst"]


def cmd_policy(args: argparse.Namespace) -> int:
    """Set what was given, then show the queue's policy as it now is."""
    args.default_rate = _with_burst(
        args.default_rate,
        args.default_burst,
        "vtrr policy: --default-burst needs --default-rate N/MS",
    )
    args.rate = _with_burst(args.rate, args.burst, "vtrr policy: --burst needs --rate N/MS")
    given = {
        "max_timeouts": args.max_timeouts,
        "max_nacks": args.max_nacks,
        "default_concurrency": args.default_concurrency,
        "default_rate": args.default_rate,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "default_max_queued": args.default_max_queued,
        "result_ttl_ms": args.result_ttl_ms,
        "dedup_ms": args.dedup_ms,
    }
    changes = any(value is not None for value in given.values())
    queue = _existing(args, changes=changes)
    if changes:
        queue.set_policy(**given)
    policy = dataclasses.asdict(queue.policy())
    _flatten_rate(policy, "default_rate", "default_burst")
    _flatten_rate(policy, "rate", "burst")
    _record(args, policy, missing="none")
    return 0


def _payload(args: argparse.Namespace) -> bytes:
    """The payload: `--payload` (as the bytes typed), `--payload-file`, or stdin when
    piped (not empty: a script that passed no input meant to pass some)."""
    if args.payload is not None:
        return encode(args.payload)
    if args.payload_file is not None:
        try:
            with open(args.payload_file, "rb") as file:
                return file.read()
        except OSError as error:
            raise _Refused(f"vtrr enqueue: cannot read {args.payload_file}: {error}") from error
    if sys.stdin is None or sys.stdin.isatty():
        # Reading a terminal would wait for a payload nobody knows is expected.
        raise _Refused("vtrr enqueue: give --payload, --payload-file, or the payload on stdin")
    payload = sys.stdin.buffer.read()
    if not payload:
        raise _Refused(
            "vtrr enqueue: stdin gave an empty payload; for an empty one, say --payload ''"
        )
    return payload


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = _payload(args)
    queue = _queue(args)
    if args.delay is None:
        added = queue.enqueue(
            args.partition, args.id, payload, weight=args.weight, priority=args.priority
        )
    else:
        item = Item(args.partition, args.id, payload, args.weight)
        added = queue.defer(args.delay, [item], priority=args.priority) == 1
    due = "" if args.delay is None else f", leasable in {args.delay} ms"
    line = (
        f"enqueued {args.id} in {args.partition}{due}"
        if added
        else f"{args.id} is already in the queue (queued, leased, delayed or dead): skipped"
    )
    _say(args, {"id": args.id, "partition": args.partition, "enqueued": added}, line)
    return 0 if added else 1


def _utc(ms: int) -> str:
    """A Unix time in ms as people read it, in UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def cmd_schedule(args: argparse.Namespace) -> int:
    next_ms = _queue(args).schedule(
        args.name, every_ms=args.every, cron=args.cron, tz=args.tz, partition=args.partition,
        payload=encode(args.payload), weight=args.weight, missed=args.missed,
    )  # fmt: skip
    line = f"scheduled {args.name} in {args.partition}: next run {next_ms} ({_utc(next_ms)})"
    _say(args, {"schedule": args.name, "next_ms": next_ms}, line)
    return 0


def cmd_unschedule(args: argparse.Namespace) -> int:
    removed = _existing(args).unschedule(*args.names)
    _say(args, {"unscheduled": removed}, f"unscheduled {removed} of {len(args.names)}")
    return 0 if removed == len(args.names) else 1


_SCHEDULE_COLUMNS = (
    "name", "every_ms", "cron", "tz", "missed", "partition", "weight", "next_ms", "payload",
)  # fmt: skip


def cmd_schedules(args: argparse.Namespace) -> int:
    queue = _existing(args)
    views: list[ScheduleView]
    if args.schedule is not None:
        one = queue.schedule_view(args.schedule, args.runs)
        views = [] if one is None else [one]
    else:
        views = sorted(queue.schedules(count=100, runs=args.runs), key=lambda v: v.name)
    rows = [dataclasses.asdict(view) for view in views]
    columns: tuple[str, ...] = _SCHEDULE_COLUMNS
    if not args.json:
        # For people the runs after the next one, when asked for, as one column.
        columns = (*columns[:-1], "runs", columns[-1]) if args.runs > 1 else columns
        for row in rows:
            row["runs"] = ",".join(str(run) for run in row["runs"])
    empty = "no schedules" if args.schedule is None else f"no schedule named {args.schedule}"
    _emit(args, rows, columns, empty)
    return 0 if views or args.schedule is None else 1


def cmd_worker(args: argparse.Namespace) -> int:
    if (args.queue is None) == (args.queue_option is None):
        raise _Refused("vtrr worker: name the queue once: vtrr worker HANDLER QUEUE [options]")
    args.queue = args.queue or args.queue_option
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    sys.path.insert(0, os.getcwd())
    handler = _handler(args.handler)
    try:
        worker = Worker(
            _queue(args),
            handler,
            concurrency=args.concurrency,
            lease_ms=args.lease_ms,
            block_ms=args.block_ms,
            backoff=Backoff(
                base_ms=args.backoff_ms, max_ms=max(args.backoff_ms, args.backoff_max_ms)
            ),
            grace_seconds=args.grace_seconds,
            exit_when_idle=args.exit_when_idle,
            cost=args.cost,
        )
    except (TypeError, ValueError) as error:
        raise _Refused(f"vtrr worker: {error}") from None
    # A permanent error (module not loaded, wrong type, no permission) ends
    # run(): main() prints it in one line, as for any verb.
    worker.run()
    return 0


def _missing_extra(error: ModuleNotFoundError, extra: str) -> Exception:
    """What a verb raises when its imports fail: a one-line hint when the extra is missing."""
    if error.name is not None and not error.name.startswith("vtrr"):
        return _Refused(f"vtrr {extra}: needs the {extra} extra: pip install 'vtrr[{extra}]'")
    return error


def cmd_exporter(args: argparse.Namespace) -> int:
    try:
        from prometheus_client import start_http_server

        from .metrics import QueueCollector, registry_for
    except ModuleNotFoundError as error:
        raise _missing_extra(error, "exporter") from error
    logging.basicConfig(format=LOG_FORMAT)
    collector = QueueCollector(_client(args), args.queues, top_k=args.top_k)
    try:
        server, _ = start_http_server(args.port, addr=args.host, registry=registry_for(collector))
    except OSError as error:
        raise _Refused(
            f"vtrr exporter: cannot listen on {args.host}:{args.port}: {error}"
        ) from None
    print(
        f"vtrr exporter: {', '.join(args.queues) or 'every queue found'} of {args.url}"
        f" at http://{args.host}:{server.server_port}/metrics",
        file=sys.stderr,
        flush=True,
    )
    try:
        threading.Event().wait()  # the server runs in its own thread
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    try:
        from . import web
    except ModuleNotFoundError as error:
        raise _missing_extra(error, "web") from error
    if args.write_token == "":
        print(
            "vtrr web: the write token is empty (--write-token or $VTRR_WEB_TOKEN): "
            "give one, or none at all for a read-only view",
            file=sys.stderr,
        )
        return 2
    web.serve(
        _client(args),
        args.queues,
        host=args.host,
        port=args.port,
        write_token=args.write_token,
        interval_s=args.interval,
        top_k=args.top_k,
    )
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    try:
        from .top import TopApp
    except ModuleNotFoundError as error:
        raise _missing_extra(error, "top") from error
    queue = _existing(args)
    TopApp(queue, top_k=args.top_k, interval_s=args.interval, read_only=not args.write).run()
    return 0


def _limit(text: str) -> Limit:
    """An option's value that is a count or `none` (the server's NONE: no limit)."""
    if text.lower() == "none":
        return "NONE"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or none, not {text!r}") from None


def _rate(text: str) -> Rate | Literal["NONE"]:
    """`N/MS` (N weight units every MS milliseconds), or `none`."""
    if text.lower() == "none":
        return "NONE"
    amount, _, per_ms = text.partition("/")
    try:
        return Rate(amount=int(amount), per_ms=int(per_ms))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N/MS or none, not {text!r}") from None


def _positive(text: str) -> float:
    """A number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, not {text!r}")
    return value


def _integer_from(minimum: int) -> Callable[[str], int]:
    """An option's type: an integer of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected an integer of at least {minimum}, not {text!r}"
            )
        return value

    return parse


def _watch_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watch",
        nargs="?",
        type=_positive,
        const=1.0,
        metavar="SECONDS",
        help="draw again every SECONDS (default 1) until Ctrl-C",
    )


def _global_options(parser: argparse.ArgumentParser, *, json_option: bool, top: bool) -> None:
    """The options that are not a verb's own, on the top parser and again on each verb's.

    The top parser holds the defaults; a verb's copy has none (SUPPRESS), so
    an option after the verb overrides one before it, and an option not
    given after the verb leaves the top's value alone (argparse copies a
    verb's defaults over the top's).
    """

    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--url",
        default=default(os.environ.get("VTRR_URL", "redis://127.0.0.1:6379/0")),
        help="the server (default: $VTRR_URL, else redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        default=default(False),
        help="the URL names a node of a Redis Cluster",
    )
    if json_option:
        parser.add_argument(
            "--json", action="store_true", default=default(False), help="machine-readable output"
        )


class _VerbParser(argparse.ArgumentParser):
    """A verb's parser. Its positionals may follow its options (`vtrr worker
    HANDLER --concurrency 8 QUEUE`), and an argument it does not know is
    reported with its own usage: the top parser would show the verbs'."""

    _parsing = False

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        if self._parsing:  # one of the intermixed parse's own passes
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            parsed, unknown = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown


def _create_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--create",
        action="store_true",
        help="go ahead even if the queue does not exist yet (this makes it)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="vtrr", description="A fair queue with leases, native in Redis."
    )
    top.add_argument(
        "--version", action="version", version=f"vtrr {importlib.metadata.version('vtrr')}"
    )
    _global_options(top, json_option=True, top=True)
    sub = top.add_subparsers(dest="command", required=True, parser_class=_VerbParser)

    def command(name: str, help: str, *, json_option: bool = True) -> argparse.ArgumentParser:
        each = sub.add_parser(name, help=help, description=help)
        _global_options(each, json_option=json_option, top=False)
        each.add_argument("queue", help="the queue's name")
        return each

    worker = sub.add_parser(
        "worker",
        help="run module:function on every item",
        description="Lease the queue's items and run the handler on each: ACK when it "
        "returns, NACK with a backoff when it raises. SIGTERM or SIGINT: stop leasing, "
        "let running jobs finish for --grace-seconds, then give their items back; a "
        "second signal gives them back at once.",
    )
    _global_options(worker, json_option=False, top=False)
    worker.add_argument(
        "handler",
        help="module:function (myapp.jobs:handle), called with a vtrr.Job; an async def "
        "runs as asyncio tasks",
    )
    worker.add_argument("queue", nargs="?", help="the queue's name")
    worker.add_argument(
        "--queue", dest="queue_option", metavar="QUEUE", help="the queue's name, as an option"
    )
    worker.add_argument(
        "--concurrency", type=int, default=1, help="jobs run at once (default: %(default)s)"
    )
    worker.add_argument(
        "--lease-ms",
        type=int,
        default=30_000,
        help="a lease's length in ms, renewed every third while its job runs: how soon a "
        "dead worker's jobs come back (default: %(default)s)",
    )
    worker.add_argument(
        "--block-ms",
        type=int,
        default=1_000,
        help="how long an idle worker's LEASE waits in the server for an item "
        "(default: %(default)s)",
    )
    worker.add_argument(
        "--backoff-ms",
        type=int,
        default=1_000,
        help="a failed job's first retry delay in ms, doubled at each retry (default: %(default)s)",
    )
    worker.add_argument(
        "--backoff-max-ms",
        type=int,
        default=3_600_000,
        help="the longest retry delay in ms (default: %(default)s)",
    )
    worker.add_argument(
        "--grace-seconds",
        type=float,
        default=30.0,
        help="after SIGTERM or SIGINT, how long running jobs may finish before their items "
        "go back unrun (default: %(default)s)",
    )
    worker.add_argument(
        "--exit-when-idle", action="store_true", help="stop once a lease finds nothing"
    )
    worker.add_argument(
        "--cost",
        choices=["time"],
        default=None,
        help="charge each finished job's partition its run time in ms (or the handler's "
        "job.cost) in place of its weight (VTRR.ACKCOST)",
    )
    worker.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        help="the lowest level of the log lines on stderr (INFO: one line per job) "
        "(default: %(default)s)",
    )
    worker.set_defaults(run=cmd_worker)
    stats = command("stats", "the queue's counts")
    _watch_option(stats)
    stats.set_defaults(run=cmd_stats)
    partitions = command("partitions", "every partition's counts and settings")
    which = partitions.add_mutually_exclusive_group()
    which.add_argument("--partition", help="only this one")
    which.add_argument(
        "--top",
        type=_integer_from(1),
        metavar="K",
        help="the K worst partitions by --by, worst first",
    )
    partitions.add_argument(
        "--by", choices=RANKS, help="the ranking of --top (default queued; oldest: longest waiting)"
    )
    partitions.add_argument(
        "--offset",
        type=_integer_from(0),
        metavar="N",
        help="with --top: skip the N worst (the next page)",
    )
    _watch_option(partitions)
    partitions.set_defaults(run=cmd_partitions)
    dead = command("dead", "the oldest dead-lettered items")
    dead.add_argument("--count", type=int, default=10)
    dead.set_defaults(run=cmd_dead)
    job = command(
        "job",
        "where items are: queued, held, leased, delayed, dead, done, cancelled or unknown",
    )
    job.add_argument("ids", nargs="+")
    job.set_defaults(run=cmd_job)
    result = command(
        "result",
        "a finished job (done, dead or cancelled) and its result; exit 1 if it has not finished",
    )
    result.add_argument("id")
    result.add_argument(
        "--wait",
        type=_positive,
        metavar="SECONDS",
        help="wait up to SECONDS for it to finish (needs the policy's --result-ttl-ms or"
        " --dedup-ms)",
    )
    result.set_defaults(run=cmd_result)
    revive = command("revive", "put dead items back in the queue")
    revive.add_argument("ids", nargs="+")
    revive.set_defaults(run=cmd_revive)
    cancel = command("cancel", "delete items, whatever their state (a leased one's lease too)")
    cancel.add_argument("ids", nargs="+")
    cancel.set_defaults(run=cmd_cancel)
    pause = command("pause", "stop leasing a partition's items")
    pause.add_argument("partition")
    _create_option(pause)
    pause.set_defaults(run=cmd_pause)
    resume = command("resume", "lease a paused partition's items again")
    resume.add_argument("partition")
    _create_option(resume)
    resume.set_defaults(run=cmd_resume)
    limit = command(
        "limit", "a partition's cap, share, rate and MAX-QUEUED: set what is given, then show them"
    )
    limit.add_argument("partition")
    limit.add_argument(
        "--concurrency",
        type=_limit,
        metavar="N|none",
        help="at most N of its items leased at once; none: the queue's default",
    )
    limit.add_argument("--share", type=int, metavar="S", help="S times a share-1 partition's")
    limit.add_argument(
        "--rate",
        type=_rate,
        metavar="N/MS|none",
        help="leased at most N weight units every MS ms, enforced at LEASE; none: no limit",
    )
    limit.add_argument("--burst", type=int, metavar="B", help="with --rate: at most B at once")
    limit.add_argument(
        "--max-queued",
        type=_limit,
        metavar="N|none",
        help="at most N of its items waiting (queued or delayed): an enqueue past it is refused"
        " whole; none: the queue's default",
    )
    _create_option(limit)
    limit.set_defaults(run=cmd_limit)
    policy = command(
        "policy",
        "when items go dead, the default and the queue's own cap and rate, the default"
        " MAX-QUEUED, how long finished jobs are kept: set what is given, then show",
    )
    for option, meaning in (
        ("--max-timeouts", "expired leases an item survives; none: any number"),
        ("--max-nacks", "nacks an item survives; none: any number"),
        ("--default-concurrency", "the cap of partitions without their own; none: no cap"),
        (
            "--default-max-queued",
            "the MAX-QUEUED of partitions without their own (limit --max-queued); none: no limit",
        ),
        (
            "--result-ttl-ms",
            "keep a finished job's outcome and result N ms (vtrr result, vtrr job); none: not kept",
        ),
        (
            "--dedup-ms",
            "skip an enqueue of an id that finished less than N ms ago; none: not skipped",
        ),
    ):
        policy.add_argument(option, type=_limit, metavar="N|none", help=meaning)
    policy.add_argument(
        "--default-rate",
        type=_rate,
        metavar="N/MS|none",
        help="the rate of partitions without their own, enforced at LEASE; none: no limit",
    )
    policy.add_argument(
        "--default-burst", type=int, metavar="B", help="with --default-rate: at most B at once"
    )
    policy.add_argument(
        "--concurrency",
        type=_limit,
        metavar="N|none",
        help="at most N items leased at once across the queue, in fair turn; none: no cap",
    )
    policy.add_argument(
        "--rate",
        type=_rate,
        metavar="N/MS|none",
        help="the whole queue leases at most N weight units every MS ms, in fair turn;"
        " none: no limit",
    )
    policy.add_argument("--burst", type=int, metavar="B", help="with --rate: at most B at once")
    _create_option(policy)
    policy.set_defaults(run=cmd_policy)
    enqueue = command("enqueue", "add one item (skipped, exit 1, if its id is already there)")
    enqueue.add_argument("partition")
    enqueue.add_argument("id")
    enqueue.add_argument("--weight", type=int, default=1, help="what the item costs its partition")
    enqueue.add_argument(
        "--priority",
        type=int,
        default=0,
        help="-100..100, larger first: strict between levels, fair inside one (default 0)",
    )
    enqueue.add_argument(
        "--delay",
        type=_integer_from(0),
        metavar="MS",
        help="leasable MS ms from now, by the server's clock (VTRR.DEFER; default: at once)",
    )
    source = enqueue.add_mutually_exclusive_group()
    source.add_argument(
        "--payload", metavar="TEXT", help="the payload ('' for none; default: stdin, not empty)"
    )
    source.add_argument("--payload-file", metavar="PATH", help="read the payload from a file")
    enqueue.set_defaults(run=cmd_enqueue)

    schedule = command(
        "schedule", "a recurring job: the server enqueues schedule:<name>:<due-ms> at each run"
    )
    schedule.add_argument("name", help="the schedule's name")
    timing = schedule.add_mutually_exclusive_group(required=True)
    timing.add_argument(
        "--every", type=int, metavar="MS", help="every MS ms, at its multiples since the epoch"
    )
    timing.add_argument(
        "--cron", metavar="PATTERN", help="when the cron pattern matches (5 to 7 fields, @daily)"
    )
    schedule.add_argument("--tz", metavar="ZONE", help="with --cron: an IANA zone (default UTC)")
    schedule.add_argument("--partition", required=True, help="the partition of its runs")
    schedule.add_argument("--payload", required=True, metavar="TEXT", help="each run's payload")
    schedule.add_argument("--weight", type=int, default=1, help="what each run costs its partition")
    schedule.add_argument(
        "--missed",
        choices=MISSED,
        default="one",
        help="runs missed while none could fire: skip them, one (the latest; default), all",
    )
    schedule.set_defaults(run=cmd_schedule)
    unschedule = command("unschedule", "remove schedules (runs already enqueued stay)")
    unschedule.add_argument("names", nargs="+")
    unschedule.set_defaults(run=cmd_unschedule)
    schedules = command("schedules", "every schedule and its next run")
    schedules.add_argument("--schedule", metavar="NAME", help="only this one")
    schedules.add_argument(
        "--runs", type=_integer_from(0), default=1, metavar="K", help="its next K runs (0 to 20)"
    )
    schedules.set_defaults(run=cmd_schedules)

    top_view = command(
        "top", "a live view of the queue in the terminal (the top extra)", json_option=False
    )
    top_view.add_argument(
        "--top-k", type=_integer_from(1), default=20, help="tenants shown (default 20)"
    )
    top_view.add_argument("--interval", type=_positive, default=1.0, help="seconds between reads")
    top_view.add_argument(
        "--write",
        action="store_true",
        help="let p and r pause and resume tenants (default: read-only)",
    )
    top_view.set_defaults(run=cmd_top)

    def serving(name: str, help: str, *, host: str, port: int) -> argparse.ArgumentParser:
        each = sub.add_parser(name, help=help)
        _global_options(each, json_option=False, top=False)
        each.add_argument("queues", nargs="*", help="the queues (none: every queue found)")
        each.add_argument("--host", default=host, help=f"the address to listen on ({host})")
        each.add_argument("--port", type=int, default=port, help=f"the port ({port})")
        return each

    exporter = serving(
        "exporter",
        "serve Prometheus metrics of queues (the exporter extra)",
        host="0.0.0.0",
        port=9808,
    )
    exporter.add_argument(
        "--top-k",
        type=_integer_from(0),
        default=20,
        help="tenants with series of their own, per queue (default 20; 0: none)",
    )
    exporter.set_defaults(run=cmd_exporter)
    web = serving(
        "web",
        "serve the web view of queues, with /metrics (the web extra)",
        host="127.0.0.1",
        port=8080,
    )
    web.add_argument(
        "--write-token",
        default=os.environ.get("VTRR_WEB_TOKEN"),
        help="the token every change needs (default: $VTRR_WEB_TOKEN; none: read-only)",
    )
    web.add_argument("--interval", type=_positive, default=1.0, help="seconds between refreshes")
    web.add_argument(
        "--top-k", type=_integer_from(1), default=20, help="tenants shown per queue (default 20)"
    )
    web.set_defaults(run=cmd_web)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except redis.exceptions.ConnectionError as error:
        print(f"vtrr: cannot reach {args.url}: {error}", file=sys.stderr)
        return 2
    except VTRRError as error:
        if isinstance(error.__cause__, redis.exceptions.MovedError):
            # redis-py's message is only "<slot> <host:port>": say what it means.
            print(
                f"vtrr: MOVED {error}: the server is a node of a Redis Cluster; add --cluster",
                file=sys.stderr,
            )
            return 2
        print(f"vtrr: {error}", file=sys.stderr)
        return 2
    except _Refused as error:
        print(error, file=sys.stderr)
        return 2
    except _Missing as error:
        print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
